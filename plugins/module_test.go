package plugins_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmparse"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/plugins"
)

// guest is a module with the ABI's exports, changed by edit.
func guest(edit func(m *wasmtest.Module)) []byte {
	m := wasmtest.Module{
		Funcs: []wasmtest.Func{
			{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
			{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
			{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
			{}, // () -> ()
		},
		Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 1, "sandflow_step": 2},
		Memory:  1,
	}
	if edit != nil {
		edit(&m)
	}
	// Imports count first among function indices.
	if n := uint32(len(m.Imports)); n > 0 {
		for k, v := range m.Exports {
			m.Exports[k] = v + n
		}
	}
	return m.Bytes()
}

func TestCheckModule(t *testing.T) {
	i32 := []byte{wasmtest.I32}
	op := wasmtest.Import{Module: "sandflow", Name: "op", Params: []byte{wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32}, Results: i32}
	for _, tc := range []struct {
		name   string
		wasm   []byte
		reason string // empty: accepted
		detail string
	}{
		{"guest", guest(nil), "", ""},
		{"guest with the ABI's imports and WASI", guest(func(m *wasmtest.Module) {
			m.Imports = []wasmtest.Import{op, {Module: "sandflow", Name: "read", Params: []byte{wasmtest.I32, wasmtest.I32}, Results: i32},
				{Module: "wasi_snapshot_preview1", Name: "clock_time_get", Params: []byte{wasmtest.I32, wasmtest.I64, wasmtest.I32}, Results: i32}}
		}), "", ""},
		{"reactor with _initialize", guest(func(m *wasmtest.Module) { m.Exports["_initialize"] = 3 }), "", ""},

		{"empty", nil, "not_wasm", "no \\0asm header"},
		{"truncated header", []byte("\x00as"), "not_wasm", ""},
		{"magic without version", []byte("\x00asm"), "not_wasm", ""},
		{"script behind the magic", []byte("\x00asm" + script), "malformed", "version"},
		{"version 2", []byte("\x00asm\x02\x00\x00\x00"), "malformed", "version"},
		{"truncated section", guest(nil)[:20], "malformed", ""},
		{"import from env", guest(func(m *wasmtest.Module) { m.Imports = []wasmtest.Import{{Module: "env", Name: "f"}} }), "import", "env.f is not allowed"},
		{"WASI function the host lacks", guest(func(m *wasmtest.Module) {
			m.Imports = []wasmtest.Import{{Module: "wasi_snapshot_preview1", Name: "sock_open"}}
		}), "import", "not a WASI preview1 function"},
		{"ABI function of another version", guest(func(m *wasmtest.Module) { m.Imports = []wasmtest.Import{{Module: "sandflow", Name: "op2"}} }), "import", "not a function of the sandflow ABI"},
		{"op of the wrong type", guest(func(m *wasmtest.Module) {
			m.Imports = []wasmtest.Import{{Module: "sandflow", Name: "op", Params: i32, Results: i32}}
		}), "import", "has type (i32) -> (i32)"},
		{"no ABI version", guest(func(m *wasmtest.Module) { delete(m.Exports, "sandflow_abi_version") }), "abi_version", "does not export sandflow_abi_version"},
		{"ABI version of the wrong type", guest(func(m *wasmtest.Module) { m.Exports["sandflow_abi_version"] = 3 }), "abi_version", "want () -> (i32)"},
		{"no run", guest(func(m *wasmtest.Module) { delete(m.Exports, "sandflow_run") }), "missing_export", "sandflow_run"},
		{"no step", guest(func(m *wasmtest.Module) { delete(m.Exports, "sandflow_step") }), "missing_export", "sandflow_step"},
		{"step of the wrong type", guest(func(m *wasmtest.Module) { m.Exports["sandflow_step"] = 3 }), "missing_export", "sandflow_step has type () -> ()"},
		{"prepare of the wrong type", guest(func(m *wasmtest.Module) { m.Exports["sandflow_prepare"] = 0 }), "missing_export", "sandflow_prepare has type () -> (i32)"},
		{"a WASI command", guest(func(m *wasmtest.Module) { m.Exports["_start"] = 3 }), "not_reactor", "_start"},
		{"_initialize of the wrong type", guest(func(m *wasmtest.Module) { m.Exports["_initialize"] = 0 }), "not_reactor", "_initialize"},
		{"no memory", guest(func(m *wasmtest.Module) { m.Memory = 0 }), "missing_export", `"memory"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plugins.CheckModule(tc.wasm)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("CheckModule: %v", err)
				}
				return
			}
			var pe *plugins.PluginError
			if !errors.As(err, &pe) || !errors.Is(err, plugins.ErrBadPlugin) {
				t.Fatalf("got %v, want a *PluginError", err)
			}
			if pe.Reason != tc.reason || !strings.Contains(pe.Detail, tc.detail) {
				t.Errorf("reason %q detail %q; want %q containing %q", pe.Reason, pe.Detail, tc.reason, tc.detail)
			}
		})
	}
}

func TestCheckModuleLimits(t *testing.T) {
	wasm := guest(func(m *wasmtest.Module) { m.Memory = 17 }) // 17 pages of 64 KiB
	if err := plugins.CheckModuleLimits(wasm, plugins.Limits{MemoryBytes: 17 << 16}); err != nil {
		t.Fatalf("memory that fits: %v", err)
	}
	err := plugins.CheckModuleLimits(wasm, plugins.Limits{MemoryBytes: 16 << 16})
	var pe *plugins.PluginError
	if !errors.As(err, &pe) || pe.Reason != "memory" {
		t.Fatalf("got %v, want reason memory", err)
	}
	if err := plugins.CheckModuleLimits(nil, plugins.DefaultLimits); !errors.As(err, &pe) || pe.Reason != "not_wasm" {
		t.Fatalf("got %v, want reason not_wasm", err)
	}
}

// TestCheckModuleStructuralLimit: a module over one of wasmparse's limits
// is refused as module_limit, with the *wasmparse.LimitError as its cause.
func TestCheckModuleStructuralLimit(t *testing.T) {
	params := make([]byte, wasmparse.MaxParams+1)
	for i := range params {
		params[i] = wasmtest.I32
	}
	wasm := guest(func(m *wasmtest.Module) { m.Funcs = append(m.Funcs, wasmtest.Func{Params: params}) })
	err := plugins.CheckModule(wasm)
	var pe *plugins.PluginError
	var le *wasmparse.LimitError
	if !errors.As(err, &pe) || pe.Reason != "module_limit" || !errors.As(err, &le) {
		t.Fatalf("got %v, want reason module_limit with a *wasmparse.LimitError", err)
	}
}
