package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmparse"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

// slowEngine is wazero with a compile that takes delay and does not look
// at its context, as a module that is slow to compile does.
type slowEngine struct {
	host.Engine
	delay time.Duration
}

func (e slowEngine) Compile(ctx context.Context, wasm []byte) (host.CompiledModule, error) {
	time.Sleep(e.delay)
	return e.Engine.Compile(context.Background(), wasm)
}

func compileHost(t *testing.T, opts host.Options) *host.Host {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(context.Background(), st, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()); st.Close() })
	return h
}

var compileManifest = host.Manifest{Name: "compiled", Entry: host.EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`)}

// Regression: 100,000 nested blocks took over two minutes of CPU in the
// engine's compile. The upload is refused before compiling, at once, with
// the limit named.
func TestAddPluginRefusesDeepNestingBeforeCompiling(t *testing.T) {
	h := compileHost(t, host.Options{})
	body := append(bytes.Repeat([]byte{0x02, 0x7f}, 100_000), 0x41, 0x01)
	body = append(body, bytes.Repeat([]byte{0x0b}, 100_000)...)
	start := time.Now()
	_, err := h.AddPlugin(context.Background(), wasmtest.Guest(body), compileManifest)
	took := time.Since(start)
	var pe *host.PluginError
	var le *wasmparse.LimitError
	if !errors.As(err, &pe) || pe.Reason != "module_limit" || !errors.As(err, &le) || le.Limit != "block_depth" {
		t.Fatalf("AddPlugin: %v, want a module_limit refusal naming block_depth", err)
	}
	if took > 2*time.Second {
		t.Errorf("the refusal took %s", took)
	}
}

// A compile past the deadline returns a typed timeout error at the
// deadline, not when the engine is done; a second upload waits for the
// one compile slot and times out too, and the caller leaving returns at
// once.
func TestCompileTimeout(t *testing.T) {
	wz, err := host.NewWazeroEngine(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wz.Close(context.Background()) })
	h := compileHost(t, host.Options{Engine: slowEngine{wz, 3 * time.Second}, CompileTimeout: 200 * time.Millisecond, MaxCompiles: 1})
	start := time.Now()
	_, err = h.AddPlugin(context.Background(), wasmtest.Guest(wasmtest.ReturnOne), compileManifest)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("AddPlugin returned after %s, past its 200ms compile timeout", took)
	}
	var pe *host.PluginError
	if !errors.Is(err, host.ErrCompileTimeout) || !errors.As(err, &pe) || pe.Reason != "compile_timeout" {
		t.Fatalf("AddPlugin: %v, want ErrCompileTimeout", err)
	}
	// The abandoned compile still holds the only slot: another waits for
	// it within its own timeout.
	other := wasmtest.Guest([]byte{0x41, 0x02})
	start = time.Now()
	if _, err := h.AddPlugin(context.Background(), other, compileManifest); !errors.Is(err, host.ErrCompileTimeout) {
		t.Fatalf("second AddPlugin: %v, want ErrCompileTimeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the second AddPlugin waited %s", took)
	}
	// A caller that goes away gets its context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.AddPlugin(ctx, other, compileManifest); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, host.ErrCompileTimeout) {
		t.Fatalf("AddPlugin with a context that ends: %v", err)
	}
	if ps, err := h.Plugins(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("refused uploads registered plugins: %v %v", ps, err)
	}
}
