// Package wazero is the host's default engine: wazero, a WebAssembly
// runtime in pure Go.
//
// Guests are metered (internal/meter): the module is rewritten so that it
// calls back into the host every few loop iterations, where its CPU budget
// and context are checked, and its mutable globals are exported, so that
// memory and globals are an instance's whole state between calls
// (engine.Snapshotter). Linear memory is allocated by the host
// (internal/linmem): on Linux a mapping of the whole memory limit, which
// can be reset to a plugin's base image through a memory file
// (engine.BaseMapped). WASI is the host's own (internal/wasip1), the same
// as on wasmtime.
package wazero

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/compilecache"
	"github.com/sandflow/sandflow/internal/meter"
)

// exitAbort is the exit code the host closes an instance with when an
// OpHandler ends it; the handler's error is reported instead.
const exitAbort = 0xabad

// Engine runs guests on wazero. It implements engine.Engine.
type Engine struct {
	rt       wazero.Runtime
	name     string
	cacheDir string // "" without a compile cache

	// wazero keeps one compiled module per module in a runtime: compiling
	// the same bytes again hands out the same code, and closing any of
	// the handles frees it for all. So the handles Compile gives out are
	// counted, by the metered module's hash, and the code is closed with
	// the last (see wzModule.Close).
	mu     sync.Mutex
	shared map[[sha256.Size]byte]*sharedModule
}

// sharedModule is a module's compiled code and the handles to it.
type sharedModule struct {
	cm   wazero.CompiledModule
	refs int
}

// New makes a wazero engine. cacheDir, when not empty, holds compiled
// artifacts across processes, keyed by module and wazero version; its
// entries are checked against their checksums first, and damaged ones
// discarded (internal/compilecache).
func New(ctx context.Context, cacheDir string) (*Engine, error) {
	// No WithCloseOnContextDone: its check at every loop head is an
	// indirect call that slows guest code several times over. Modules are
	// metered instead (internal/meter), and a watchdog stops them.
	cfg := wazero.NewRuntimeConfig()
	if cacheDir != "" {
		if _, _, err := compilecache.Scan(cacheDir, true); err != nil {
			return nil, fmt.Errorf("wazero compilation cache: %w", err)
		}
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("wazero compilation cache: %w", err)
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := defineWASI(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzOp), []api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("kind", "name_ptr", "name_len", "payload_ptr", "payload_len", "resp_ptr", "resp_cap").Export(abi.FuncOp).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzRead), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("ptr", "len").Export(abi.FuncRead).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzTick), nil, nil).Export(meter.TickName).
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &Engine{rt: rt, name: "wazero/" + wazeroVersion(), cacheDir: cacheDir}, nil
}

func wazeroVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// Name implements engine.Engine.
func (e *Engine) Name() string { return e.name }

// Close implements engine.Engine.
func (e *Engine) Close(ctx context.Context) error { return e.rt.Close(ctx) }

// Compile implements engine.Engine.
func (e *Engine) Compile(ctx context.Context, wasm []byte) (engine.CompiledModule, error) {
	metered, err := meter.InstrumentModule(wasm)
	if err != nil {
		return nil, &engine.PluginError{Reason: "compile", Detail: err.Error()}
	}
	cm, err := e.rt.CompileModule(ctx, metered.Wasm)
	if err != nil && e.cacheDir != "" && strings.Contains(err.Error(), "compilationcache") {
		// An entry damaged since the engine checked the cache: checked
		// again, it is discarded, and the module compiled anew.
		if _, _, serr := compilecache.Scan(e.cacheDir, true); serr == nil {
			cm, err = e.rt.CompileModule(ctx, metered.Wasm)
		}
	}
	if err != nil {
		return nil, &engine.PluginError{Reason: "compile", Detail: err.Error()}
	}
	if e.cacheDir != "" {
		// The cache is best effort: an entry left unsealed is discarded
		// and compiled again by the next process.
		_ = compilecache.Seal(e.cacheDir)
	}
	key := sha256.Sum256(metered.Wasm)
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.shared[key]
	if s == nil {
		s = &sharedModule{cm: cm}
		if e.shared == nil {
			e.shared = map[[sha256.Size]byte]*sharedModule{}
		}
		e.shared[key] = s
	}
	// Another handle's code, when the module was compiled before: cm is
	// that same code, and is not closed here.
	s.refs++
	return &wzModule{e: e, cm: s.cm, key: key, snapshots: metered.OutsideState == ""}, nil
}

type wzModule struct {
	e      *Engine
	cm     wazero.CompiledModule
	key    [sha256.Size]byte
	closed bool // guarded by e.mu
	// snapshots: memory and globals are an instance's whole state between
	// calls (no code changes a table or drops a segment).
	snapshots bool
}

// CanSnapshot implements engine.SnapshotModule.
func (m *wzModule) CanSnapshot() bool { return m.snapshots }

// Poolable implements engine.Poolable.
func (*wzModule) Poolable() {}

// Close implements engine.CompiledModule: the code is closed with the
// last handle to it (Engine.shared).
func (m *wzModule) Close(ctx context.Context) error {
	m.e.mu.Lock()
	defer m.e.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	s := m.e.shared[m.key]
	if s == nil || s.cm != m.cm {
		return nil
	}
	if s.refs--; s.refs > 0 {
		return nil
	}
	delete(m.e.shared, m.key)
	return m.cm.Close(ctx)
}

var (
	_ engine.Engine         = (*Engine)(nil)
	_ engine.Poolable       = (*wzModule)(nil)
	_ engine.SnapshotModule = (*wzModule)(nil)
	_ engine.BaseMapped     = (*wzInstance)(nil)
	_ engine.MemorySizer    = (*wzInstance)(nil)
	_ engine.CPUBudget      = (*wzInstance)(nil)
)
