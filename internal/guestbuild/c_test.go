package guestbuild

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// resetC forgets the process's C builds and toolchain probe, before the
// test and after it, so that a test's SANDFLOW_WASI_CC takes effect and
// does not leak into the next.
func resetC(t *testing.T) {
	t.Helper()
	reset := func() {
		cMu.Lock()
		defer cMu.Unlock()
		cBuilt, cTmp, cProbe, cOnce = map[string]string{}, "", nil, false
	}
	reset()
	t.Cleanup(reset)
}

// Without the C toolchain the tests read the module committed beside the
// C guest's source, so that a machine with only Go passes them. (BuildC
// used to fail with ErrNoCToolchain here.)
func TestBuildCWithoutToolchainReadsCommittedModule(t *testing.T) {
	resetC(t)
	t.Setenv("SANDFLOW_WASI_CC", "sandflow-no-such-compiler")
	for _, dir := range []string{"../../examples/c-deploy", "../../bench/workload/testdata/guests/cworkload"} {
		p, err := BuildC(dir)
		if err != nil {
			t.Fatalf("BuildC(%s): %v", dir, err)
		}
		if want := CommittedC(dir); p != want {
			t.Errorf("BuildC(%s) = %s, want the committed %s", dir, p, want)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x00asm\x01\x00\x00\x00")) {
			t.Errorf("%s is not a wasm module: % x", p, b[:min(8, len(b))])
		}
	}
}

// With neither the toolchain nor a committed module, the error says the
// toolchain is missing.
func TestBuildCWithoutToolchainOrCommittedModuleFails(t *testing.T) {
	resetC(t)
	t.Setenv("SANDFLOW_WASI_CC", "sandflow-no-such-compiler")
	dir := filepath.Join(t.TempDir(), "cguest")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "build.sh"), []byte("exit 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := BuildC(dir); !errors.Is(err, ErrNoCToolchain) {
		t.Fatalf("BuildC = %q, %v; want an error wrapping ErrNoCToolchain", p, err)
	}
}

func TestCommittedCIsBuildShDefaultOutput(t *testing.T) {
	abs, err := filepath.Abs("../../examples/c-deploy")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := CommittedC("../../examples/c-deploy"), filepath.Join(abs, "c-deploy.wasm"); got != want {
		t.Errorf("CommittedC = %s, want %s", got, want)
	}
}
