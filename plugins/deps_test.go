package plugins_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyLeaves: plugins sits below the host, which imports it,
// and below jsprogram, which imports the host; so it may use the ABI, the
// internal leaves and the standard library, nothing else of ours.
func TestImportsOnlyLeaves(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	const mod = "github.com/sandflow/sandflow"
	seen := false
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == mod+"/plugins":
			seen = true
		case p == mod+"/abi", strings.HasPrefix(p, mod+"/abi/"), strings.HasPrefix(p, mod+"/internal/"):
		case p == mod || strings.HasPrefix(p, mod+"/"):
			t.Errorf("plugins depends on %s", p)
		}
	}
	if !seen {
		t.Fatalf("go list -deps did not list plugins itself: %s", out)
	}
}
