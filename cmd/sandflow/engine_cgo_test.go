//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// A run started on wasmtime is answered on wazero (SANDFLOW_ENGINE unset)
// and replays there; each engine keeps its own compiled-module cache.
func TestCLIEngineFlag(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy") // on wazero, the default
	ri := decode[host.RunInfo](t, c.ok("--engine", "wasmtime", "call", "deploy", "--input", `{"service":"api"}`, "--json"))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
		t.Fatalf("call on wasmtime: %+v", ri)
	}
	for _, engine := range []string{"wazero", "wasmtime"} {
		if files, _ := os.ReadDir(filepath.Join(c.data, "cache", engine)); len(files) == 0 {
			t.Errorf("no compiled modules in cache/%s", engine)
		}
	}
	done := decode[host.RunInfo](t, c.ok("asks", "answer", ri.Waiting[0].AskID, "approve", "--json"))
	if done.Status != store.StatusCompleted || !strings.Contains(compact(t, done.Result), `"deployed":true`) {
		t.Fatalf("answered on wazero: %+v", done)
	}
	// The environment selects the engine too; the replay check passes on it.
	cmd := exec.Command(bin, "--data", c.data, "replay", ri.ID)
	cmd.Env = append(os.Environ(), "SANDFLOW_ENGINE=wasmtime")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("replay on wasmtime: %v\n%s", err, out)
	}
}
