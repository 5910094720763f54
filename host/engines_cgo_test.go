//go:build cgo

package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

func init() {
	testEngines = append(testEngines, testEngine{"wasmtime", sharedWasmtimeEngine})
}

var (
	wasmtimeOnce sync.Once
	wasmtimeEng  host.Engine
	wasmtimeErr  error
)

// sharedWasmtimeEngine is one wasmtime engine for the whole test binary,
// with its own cache directory, as sharedEngine is for wazero.
func sharedWasmtimeEngine(t testing.TB) host.Engine {
	wasmtimeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandflow-test-wasmtime-cache-")
		if err != nil {
			wasmtimeErr = err
			return
		}
		wasmtimeEng, wasmtimeErr = host.NewWasmtimeEngine(context.Background(), dir)
	})
	if wasmtimeErr != nil {
		t.Fatal(wasmtimeErr)
	}
	return wasmtimeEng
}

func TestWasmtimeEngineName(t *testing.T) {
	e := sharedWasmtimeEngine(t)
	if !strings.HasPrefix(e.Name(), "wasmtime/v39") {
		t.Errorf("name %q", e.Name())
	}
	ne, err := host.NewEngine(context.Background(), "wasmtime", "")
	if err != nil {
		t.Fatal(err)
	}
	defer ne.Close(context.Background())
	if _, ok := ne.(*host.WasmtimeEngine); !ok {
		t.Errorf("NewEngine(wasmtime) made a %T", ne)
	}
}

// cacheFiles lists the artifacts in a cache directory.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.cwasm"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// abiVersion instantiates cm and calls its version export: the module
// works.
func abiVersion(t *testing.T, cm host.CompiledModule) int32 {
	t.Helper()
	ctx := context.Background()
	inst, err := cm.Instantiate(ctx, host.InstanceConfig{Clock: &enginetest.StillClock{Nanos: 1.7e18}, Random: bytes.NewReader(make([]byte, 64<<10)), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
		MemoryLimit: 256 << 20, CPULimit: 10 * time.Second, Ops: enginetest.OpFunc(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	v, err := inst.Call(ctx, abi.VersionExport)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newWasmtime(t *testing.T, dir string) *host.WasmtimeEngine {
	t.Helper()
	e, err := host.NewWasmtimeEngine(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func TestWasmtimeCacheReload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wasm := guest(t, kitchenDir)

	first := newWasmtime(t, dir)
	t0 := time.Now()
	cm, err := first.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	compileTime := time.Since(t0)
	cm.Close(ctx)
	files := cacheFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("cache holds %v, want one artifact", files)
	}
	if h, m, c := host.WasmtimeCacheStats(first); h != 0 || m != 1 || c != 0 {
		t.Errorf("first compile: %d hits %d misses %d corrupt", h, m, c)
	}
	before, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}

	// Another engine (another process, say) on the same directory loads
	// the artifact instead of compiling.
	second := newWasmtime(t, dir)
	t0 = time.Now()
	cm, err = second.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	loadTime := time.Since(t0)
	defer cm.Close(ctx)
	if h, m, c := host.WasmtimeCacheStats(second); h != 1 || m != 0 || c != 0 {
		t.Errorf("reload: %d hits %d misses %d corrupt", h, m, c)
	}
	after, err := os.Stat(files[0])
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the artifact was rewritten: %v", err)
	}
	if v := abiVersion(t, cm); v != abi.Version {
		t.Errorf("the reloaded module answers version %d", v)
	}
	t.Logf("compile %s, load from the cache %s", compileTime, loadTime)

	// A different module has its own artifact.
	if _, err := second.Compile(ctx, guest(t, "host/testdata/guests/rawabi")); err != nil {
		t.Fatal(err)
	}
	if n := len(cacheFiles(t, dir)); n != 2 {
		t.Errorf("%d artifacts for two modules", n)
	}
}

func TestWasmtimeCorruptCacheIsReplaced(t *testing.T) {
	ctx := context.Background()
	// A small module: each case compiles it twice.
	wasm := wasmtest.Guest(wasmtest.Loop)
	for name, corrupt := range map[string]func(b []byte) []byte{
		"garbage":   func(b []byte) []byte { return bytes.Repeat([]byte("not an artifact "), 100) },
		"truncated": func(b []byte) []byte { return b[:len(b)/3] },
		"empty":     func(b []byte) []byte { return nil },
		// wasmtime loads an artifact without checking it: one flipped
		// bit is found by its checksum alone.
		"one bit flipped": func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x10; return b },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			e := newWasmtime(t, dir)
			cm, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			cm.Close(ctx)
			files := cacheFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("cache holds %v", files)
			}
			good, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			bad := corrupt(good)
			if err := os.WriteFile(files[0], bad, 0o600); err != nil {
				t.Fatal(err)
			}

			cm, err = e.Compile(ctx, wasm)
			if err != nil {
				t.Fatalf("a corrupt artifact made Compile fail: %v", err)
			}
			defer cm.Close(ctx)
			if h, m, c := host.WasmtimeCacheStats(e); h != 0 || m != 2 || c != 1 {
				t.Errorf("%d hits %d misses %d corrupt; want the corrupt artifact found and replaced", h, m, c)
			}
			if v := abiVersion(t, cm); v != abi.Version {
				t.Errorf("version %d", v)
			}
			now, err := os.ReadFile(files[0])
			if err != nil || bytes.Equal(now, bad) {
				t.Fatalf("the corrupt artifact is still there (%v)", err)
			}
			// The replacement loads.
			cm2, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			cm2.Close(ctx)
			if h, _, _ := host.WasmtimeCacheStats(e); h != 1 {
				t.Errorf("the replacement artifact did not load (%d hits)", h)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(leftovers) != 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

func TestWasmtimeCompileRefusesInvalidModules(t *testing.T) {
	_, err := sharedWasmtimeEngine(t).Compile(context.Background(), []byte("\x00asm\x01\x00\x00\x00\x01\x05"))
	var pe *host.PluginError
	if !errors.As(err, &pe) || pe.Reason != "compile" {
		t.Errorf("want a compile *PluginError, got %v", err)
	}
}

// A plugin can pick its engine: the host makes the other engine when a
// manifest first asks for it, and the plugin's runs use it.
func TestEnginePerPlugin(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, err := host.OpenDir(ctx, dir, nil) // wazero by default
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	m := manifest(t, "examples/deploy")
	m.Engine = host.EngineWasmtime
	if _, err := h.AddPlugin(ctx, guest(t, "examples/deploy"), m); err != nil {
		t.Fatal(err)
	}
	ri, err := h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), nil)
	if err != nil || ri.Status != store.StatusWaiting {
		t.Fatalf("%+v %v", ri, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", host.EngineWasmtime)); err != nil {
		t.Errorf("no wasmtime cache directory: %v", err)
	}
	bad := m
	bad.Name, bad.Engine = "nope", "v8"
	if _, err := h.AddPlugin(ctx, guest(t, "examples/deploy"), bad); !errors.Is(err, host.ErrBadManifest) {
		t.Errorf("an unknown engine: %v", err)
	}
}

// EngineFor while the Host closes either makes its engine before Close
// (which closes it) or is refused with ErrClosed, and after Close it is
// refused: an engine made then would never be closed. Under -race this
// also checks that Close does not read the Host's engines while EngineFor
// adds one.
func TestEngineForDuringClose(t *testing.T) {
	ctx := context.Background()
	h, err := host.OpenDir(ctx, t.TempDir(), nil) // wazero by default: wasmtime is made on first use
	if err != nil {
		t.Fatal(err)
	}
	made := make(chan error, 1)
	go func() {
		_, err := h.EngineFor(ctx, host.EngineWasmtime)
		made <- err
	}()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-made; err != nil && !errors.Is(err, host.ErrClosed) {
		t.Errorf("EngineFor during Close: %v", err)
	}
	for _, kind := range []string{host.EngineWasmtime, host.EngineWazero} {
		if e, err := h.EngineFor(ctx, kind); !errors.Is(err, host.ErrClosed) {
			t.Errorf("EngineFor(%s) after Close: %v, %v; want ErrClosed", kind, e, err)
		}
	}
}
