package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// A guest must be a WASI reactor: a module exporting _start (a command,
// whose toolchain runs constructors in _start or around every export) or
// an _initialize that is not () -> () is refused at upload, naming the
// export; a reactor with no _initialize, which needs no initialisation,
// is taken. (Issue 27: abi/README.md said "reactor" without saying what
// that requires, and a command module was accepted.)
func TestUploadRequiresAReactor(t *testing.T) {
	i32 := wasmtest.I32
	guest := func(extra map[string]wasmtest.Func) []byte {
		m := wasmtest.Module{
			Funcs: []wasmtest.Func{
				{Results: []byte{i32}, Body: wasmtest.ReturnOne},
				{Results: []byte{i32}, Body: []byte{0x41, 0x00}},
				{Results: []byte{i32}, Body: []byte{0x41, 0x00}},
			},
			Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 1, "sandflow_step": 2},
			Memory:  1,
		}
		for name, fn := range extra {
			m.Exports[name] = uint32(len(m.Funcs))
			m.Funcs = append(m.Funcs, fn)
		}
		return m.Bytes()
	}
	void := wasmtest.Func{}
	cases := []struct {
		name   string
		extra  map[string]wasmtest.Func
		reason string // "" when the upload is taken
	}{
		{"no _initialize", nil, ""},
		{"_initialize", map[string]wasmtest.Func{"_initialize": void}, ""},
		{"_start", map[string]wasmtest.Func{"_start": void}, "not_reactor"},
		{"_start beside _initialize", map[string]wasmtest.Func{"_start": void, "_initialize": void}, "not_reactor"},
		{"_initialize returning i32", map[string]wasmtest.Func{"_initialize": {Results: []byte{i32}, Body: wasmtest.ReturnOne}}, "not_reactor"},
	}
	m := host.Manifest{Name: "reactor", Entry: "execute", InputSchema: json.RawMessage(`{"type":"object"}`)}
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.h.AddPlugin(context.Background(), guest(c.extra), m)
				var pe *host.PluginError
				switch {
				case c.reason == "" && err != nil:
					t.Fatalf("a reactor was refused: %v", err)
				case c.reason != "" && (!errors.As(err, &pe) || pe.Reason != c.reason || !errors.Is(err, host.ErrBadPlugin)):
					t.Fatalf("want a %s refusal, got %v", c.reason, err)
				}
			})
		}
	})
}

// A module that says which tool it is (the Go SDK's sandflow.Name, the
// sandflow_describe export) is refused with another tool's manifest, at
// upload and with nothing stored, instead of failing when it is called.
func TestUploadRefusesAnotherToolsManifest(t *testing.T) {
	ctx := context.Background()
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		wrong := manifest(t, "examples/remind")
		_, err := f.h.AddPlugin(ctx, guest(t, "examples/deploy"), wrong)
		var pe *host.PluginError
		if !errors.As(err, &pe) || pe.Reason != "manifest_mismatch" || !errors.Is(err, host.ErrBadPlugin) || !strings.Contains(err.Error(), `the tool "deploy"`) {
			t.Fatalf("deploy's module with remind's manifest: %v", err)
		}
		if ps, err := f.h.Plugins(ctx); err != nil || len(ps) != 0 {
			t.Errorf("a refused upload stored %d plugins (%v)", len(ps), err)
		}
		if _, err := f.h.AddPlugin(ctx, guest(t, "examples/deploy"), manifest(t, "examples/deploy")); err != nil {
			t.Errorf("deploy's module with its own manifest: %v", err)
		}
	})
}
