package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary links no package testing, nor the benchmark
// suite built on it: the benchmark command is cmd/sandflow-bench. (The
// bench command used to be here, linking bench/suite and bench/workload.)
func TestBinaryLinksNoTestingPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	linked := map[string]bool{}
	for _, p := range deps {
		linked[p] = true
		if p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasPrefix(p, "github.com/sandflow/sandflow/bench") {
			t.Errorf("cmd/sandflow links %s", p)
		}
	}
	// The list is the binary's: it has the host and this command.
	for _, want := range []string{"github.com/sandflow/sandflow/host", "github.com/sandflow/sandflow/cmd/sandflow"} {
		if !linked[want] {
			t.Errorf("go list -deps lacks %s, so it did not list the binary's packages: %v", want, deps)
		}
	}
}
