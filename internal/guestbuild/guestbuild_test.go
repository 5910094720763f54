package guestbuild

import (
	"bytes"
	"os"
	"testing"
)

// A Go guest builds against the workspace's guest-sdk and abi even when
// the caller runs with GOWORK=off, as bench/peers' tests do: its go.mod
// requires them at versions only go.work provides.
func TestBuildUsesWorkspaceDespiteGOWORKOff(t *testing.T) {
	t.Setenv("GOWORK", "off")
	mu.Lock()
	built = map[string]string{}
	mu.Unlock()
	p, err := Build("../../examples/remind")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("%s is not a wasm module", p)
	}
}
