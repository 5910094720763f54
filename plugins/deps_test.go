package plugins_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsOnlyLeaves: plugins sits below the host, which imports it,
// and below jsprogram, which imports the host; so it may use the ABI, the
// internal leaves and the standard library, nothing else of ours.
func TestImportsOnlyLeaves(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/sandflow/sandflow"
	for _, p := range pkg.Imports {
		switch {
		case p == mod+"/abi", strings.HasPrefix(p, mod+"/abi/"), strings.HasPrefix(p, mod+"/internal/"):
		case p == mod || strings.HasPrefix(p, mod+"/"), strings.Contains(strings.Split(p, "/")[0], "."):
			t.Errorf("plugins imports %s", p)
		}
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("read no imports")
	}
}
