package guestbuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A plugin author's module, outside this repository, builds a tool with
// guest-sdk and nothing of the host: its go.mod alone (GOWORK=off, no
// proxy) resolves guest-sdk and abi, pointed at this repository's copies
// by the consumer's own replace lines as a published version would be
// fetched. guest-sdk used to require the host module through a replace
// line of its own, which Go ignores in a dependency, and to import the
// host's internal/jsonfast, so this module could not build.
func TestGuestSDKBuildsInAModuleOutsideTheRepository(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the consumer module %s is inside the repository %s", dir, root)
	}
	gomod := "module example.com/plugin\n\ngo 1.26.8\n\n" +
		"require github.com/sandflow/sandflow/guest-sdk v0.0.0\n\n" +
		"replace (\n" +
		"\tgithub.com/sandflow/sandflow/abi => " + filepath.Join(root, "abi") + "\n" +
		"\tgithub.com/sandflow/sandflow/guest-sdk => " + filepath.Join(root, "guest-sdk") + "\n" +
		")\n"
	tool := `package main

import sandflow "github.com/sandflow/sandflow/guest-sdk"

type input struct {
	Name string ` + "`json:\"name\"`" + `
}

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (string, error) {
		return "hello " + in.Name, nil
	})
}

func main() {}
`
	for name, text := range map[string]string{"go.mod": gomod, "main.go": tool} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// GOPROXY=off: nothing may come from anywhere but the two replaced
	// directories. GOFLAGS=-mod=mod lets tidy write the indirect abi
	// requirement an author's go mod tidy would write.
	env := append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod", "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goTool(), args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	run("mod", "tidy")
	run("build", "-buildmode=c-shared", "-trimpath", "-o", "tool.wasm", ".")
	b, err := os.ReadFile(filepath.Join(dir, "tool.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("tool.wasm is not a wasm module: % x", b[:min(8, len(b))])
	}

	mods := strings.Fields(run("list", "-m", "all"))
	deps := strings.Fields(run("list", "-deps", "."))
	for _, want := range []string{"github.com/sandflow/sandflow/guest-sdk", "github.com/sandflow/sandflow/abi"} {
		if !contains(mods, want) {
			t.Errorf("go list -m all lacks %s: %v", want, mods)
		}
		if !contains(deps, want) {
			t.Errorf("go list -deps lacks %s: %v", want, deps)
		}
	}
	for _, list := range [][]string{mods, deps} {
		for _, p := range list {
			for _, host := range []string{"wazero", "wasmtime", "goja", "github.com/sandflow/sandflow/internal", "go.etcd.io"} {
				if strings.Contains(p, host) {
					t.Errorf("the plugin depends on %s, a host dependency (%s)", p, host)
				}
			}
			if p == "github.com/sandflow/sandflow" || strings.HasPrefix(p, "github.com/sandflow/sandflow/host") {
				t.Errorf("the plugin depends on the host module: %s", p)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
