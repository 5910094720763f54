package peers

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

// The plugin's source is embedded so that any binary linking this package
// can build it, whatever its working directory.
//
//go:embed testdata/extismguest/main.go
var extismGuestSource []byte

// The guest module's go.mod, written beside the source at build time.
const extismGuestGoMod = "module github.com/sandflow/sandflow/bench/peers/testdata/extismguest\n\ngo 1.26.8\n"

// ExtismInput and ExtismOutput are the greet call's input and the output
// it must give: the input and result of sandflow's trivial tool call
// (workload.GreetInput and workload.GreetResult; TestExtismSameWork).
const (
	ExtismInput  = `{"mode":"greet","name":"world"}`
	ExtismOutput = `{"greeting":"hello world"}`
)

// extismFunction is the plugin's export that the benchmarks call.
const extismFunction = "greet"

var extismWasm = sync.OnceValues(buildExtismGuest)

// ExtismGuest returns the Extism plugin built from testdata/extismguest
// with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared. The first call builds
// it (a few seconds); later calls return the same bytes.
func ExtismGuest() ([]byte, error) { return extismWasm() }

func buildExtismGuest() ([]byte, error) {
	dir, err := os.MkdirTemp("", "sandflow-peers-extismguest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(extismGuestGoMod), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), extismGuestSource, 0o644); err != nil {
		return nil, err
	}
	p, err := guestbuild.Build(dir)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// extismCompiled keeps, for the process, wazero's compilation of the
// plugin and of Extism's kernel module, so that only the first
// NewExtismPlugin compiles them.
var extismCompiled = wazero.NewCompilationCache()

// NewExtismPlugin compiles the greet plugin with Extism's Go SDK, with
// WASI on (a Go guest needs it) and no host functions of ours.
func NewExtismPlugin(ctx context.Context) (*extism.CompiledPlugin, error) {
	wasm, err := ExtismGuest()
	if err != nil {
		return nil, err
	}
	manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm, Name: "extismguest"}}}
	config := extism.PluginConfig{
		RuntimeConfig: wazero.NewRuntimeConfig().WithCompilationCache(extismCompiled),
		EnableWasi:    true,
	}
	return extism.NewCompiledPlugin(ctx, manifest, config, nil)
}

// ExtismGreet calls greet on p with ExtismInput and checks the output.
func ExtismGreet(p *extism.Plugin) error {
	rc, out, err := p.Call(extismFunction, []byte(ExtismInput))
	if err != nil {
		return err
	}
	if rc != 0 || !bytes.Equal(out, []byte(ExtismOutput)) {
		return fmt.Errorf("greet returned %d and %q, want 0 and %q", rc, out, ExtismOutput)
	}
	return nil
}

// ExtismCall benchmarks Extism's per-call cost: one op is one Call of the
// greet export on a plugin instance that exists already and has been
// called once (so the Go guest's runtime is initialized): the input copied
// in, the guest's JSON decode and encode, the output copied out.
func ExtismCall() func(b *testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		cp, err := NewExtismPlugin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer cp.Close(ctx)
		p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close(ctx)
		if err := ExtismGreet(p); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := ExtismGreet(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// ExtismInstantiateAndCall benchmarks a cold call: one op makes a new
// instance of the compiled plugin (Extism's kernel module and the guest),
// calls greet once, which first runs the Go guest's _initialize, and closes
// the instance. Compiling is not timed.
func ExtismInstantiateAndCall() func(b *testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		cp, err := NewExtismPlugin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer cp.Close(ctx)
		for b.Loop() {
			p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
			if err != nil {
				b.Fatal(err)
			}
			err = ExtismGreet(p)
			p.Close(ctx)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
