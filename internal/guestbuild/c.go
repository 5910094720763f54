package guestbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// CPackages are the Debian packages a C guest is built with: clang and
// the wasm linker, wasi-libc (the wasm32-wasi sysroot), and compiler-rt's
// wasm32 builtins.
const CPackages = "clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32"

// ErrNoCToolchain is wrapped by BuildC's error when clang-14 or the
// wasm32-wasi sysroot is missing.
var ErrNoCToolchain = errors.New("no C toolchain for wasm32-wasi")

// cInstall is the hint BuildC's toolchain errors end with.
const cInstall = "install it with: apt-get install -y --no-install-recommends " + CPackages

var (
	cMu    sync.Mutex
	cBuilt = map[string]string{}
	cTmp   string
	cProbe error // the toolchain check's outcome, once made
	cOnce  bool
)

// BuildC returns the path of the C guest in dir as a .wasm file. With the C
// toolchain installed it rebuilds the guest by running dir's build.sh with
// an output path as its argument; without it (clang, wasm-ld, wasi-libc or
// compiler-rt's builtins missing) it returns the module committed beside
// the source, dir/<base of dir>.wasm, which build.sh makes byte for byte
// (.ci/run checks that). The error wraps ErrNoCToolchain only when the
// toolchain and the committed module are both missing. Builds are cached
// for the process.
//
// The compiler is clang-14, or $SANDFLOW_WASI_CC when set; build.sh gets it
// as $CC. ($CC itself is not read: it names cgo's host compiler.)
func BuildC(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	cMu.Lock()
	defer cMu.Unlock()
	if p, ok := cBuilt[abs]; ok {
		return p, nil
	}
	if cTmp == "" {
		if cTmp, err = os.MkdirTemp("", "sandflow-c-guests-"); err != nil {
			return "", err
		}
	}
	if !cOnce {
		cProbe, cOnce = probeC(cTmp), true
	}
	if cProbe != nil {
		committed := CommittedC(abs)
		if _, err := os.Stat(committed); err != nil {
			return "", fmt.Errorf("%w; and no committed module: %v", cProbe, err)
		}
		cBuilt[abs] = committed
		return committed, nil
	}
	out := filepath.Join(cTmp, fmt.Sprintf("%s-%d.wasm", filepath.Base(abs), len(cBuilt)))
	cmd := exec.Command("sh", "build.sh", out)
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "CC="+wasiCC())
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building C guest %s: %v\n%s", dir, err, output.String())
	}
	cBuilt[abs] = out
	return out, nil
}

// CommittedC is the path of the module committed beside the C guest in
// dir: dir/<base of dir>.wasm, build.sh's default output.
func CommittedC(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Join(dir, filepath.Base(dir)+".wasm")
}

// probeC builds a minimal reactor that uses libc (malloc, write), which
// needs every piece of the toolchain: the compiler, wasm-ld, the sysroot's
// headers, crt1-reactor.o and libc.a, and the builtins.
func probeC(tmp string) error {
	cc := wasiCC()
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("%w: %s not found; %s", ErrNoCToolchain, cc, cInstall)
	}
	src := filepath.Join(tmp, "probe.c")
	prog := `#include <stdlib.h>
#include <unistd.h>
__attribute__((export_name("probe"))) int probe(int n) {
	char *p = malloc(n + 1);
	p[n] = (char)(n * 3.5);
	return (int)write(1, p, n) + (int)((long long)n * n / 7);
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(cc, "--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-o", filepath.Join(tmp, "probe.wasm"), src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s cannot build a wasm32-wasi reactor (%v); %s\n%s", ErrNoCToolchain, cc, err, cInstall, out)
	}
	return nil
}

func wasiCC() string {
	if cc := os.Getenv("SANDFLOW_WASI_CC"); cc != "" {
		return cc
	}
	return "clang-14"
}
