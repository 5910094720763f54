// Package guestbuild builds guest modules for tests and the demo. Go guests
// are built from source with the Go toolchain (GOOS=wasip1 GOARCH=wasm go
// build -buildmode=c-shared) in the repository's workspace (go.work), so
// they compile against the working copies of guest-sdk and abi; no Go
// guest binary is committed. C guests are rebuilt by their build.sh when
// the C toolchain is installed and otherwise read from the .wasm committed
// beside their source (see BuildC).
package guestbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	tmp   string
)

// Build compiles the main package in dir (inside a guest module) and returns
// the path of the .wasm file. Builds are cached for the process.
func Build(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[abs]; ok {
		return p, nil
	}
	if tmp == "" {
		if tmp, err = os.MkdirTemp("", "sandflow-guests-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(tmp, fmt.Sprintf("%s-%d.wasm", filepath.Base(abs), len(built)))
	cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	// The workspace is named, not found, so that a caller's GOWORK=off
	// (bench/peers' tests run so) does not reach the guest build, whose
	// module requires guest-sdk and abi at versions only go.work provides.
	if w := workFile(abs); w != "" {
		cmd.Env = append(cmd.Env, "GOWORK="+w)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building guest %s: %v\n%s", dir, err, stderr.String())
	}
	built[abs] = out
	return out, nil
}

// MustRead builds dir and returns the module bytes, panicking on failure.
func MustRead(dir string) []byte {
	p, err := Build(dir)
	if err != nil {
		panic(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return b
}

// workFile is the go.work in dir or the nearest directory above it, or ""
// when there is none.
func workFile(dir string) string {
	for {
		if p := filepath.Join(dir, "go.work"); fileExists(p) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// RepoRoot finds the repository root (the directory holding go.mod of the
// host module) from the working directory upward.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/sandflow/sandflow\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no sandflow repository above the working directory")
		}
		dir = parent
	}
}
