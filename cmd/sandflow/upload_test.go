package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmtest"
)

// TestCLIPluginAddUsage: plugin add refuses a module or script with the
// wrong flags before it reads the manifest or opens the data directory,
// each with its exit code and what to do instead; and registers nothing.
func TestCLIPluginAddUsage(t *testing.T) {
	c := newCLI(t)
	root := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wasm := write("tool.wasm", wasmtest.Guest(wasmtest.ReturnOne))
	js := write("tool.js", []byte(`defineWorkflowTool({ description: "x", inputSchema: { type: "object" }, async execute() { "use workflow"; return 1; } });`))
	jsWasm := write("magic.js", []byte("\x00asm"+`defineWorkflowTool({});`))
	config := write("w.json", []byte(`{"sandflow":"workflow-tool"}`))
	bad := write("bad.json", []byte(`{"name":"tool"}`))
	missing := filepath.Join(root, "missing.json")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"script with a manifest, not read", []string{js, "--manifest", missing}, exitUsage, "needs no --manifest"},
		{"module without a manifest", []string{wasm}, exitUsage, "--manifest is required"},
		{"module with a name", []string{wasm, "--manifest", bad, "--name", "x"}, exitUsage, "--name is for JavaScript tools"},
		{"config without a manifest", []string{config}, exitUsage, "--manifest is required"},
		{"script file behind the wasm magic", []string{jsWasm}, exitUsage, "--manifest is required"},
		{"manifest missing", []string{wasm, "--manifest", missing}, exitNotFound, "missing.json"},
		{"manifest invalid", []string{wasm, "--manifest", bad}, exitInvalid, "invalid plugin manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := c.expect(tc.code, append([]string{"plugin", "add"}, tc.args...)...); !strings.Contains(errs, tc.says) {
				t.Errorf("stderr %q lacks %q", errs, tc.says)
			}
		})
	}
	if out := strings.TrimSpace(c.ok("plugin", "list", "--json")); out != "[]" {
		t.Fatalf("refused adds registered %s", out)
	}
}
