package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

// tight registers the kitchen guest again under another name with small
// limits.
func (k *kitchen) tight(name string, l host.ManifestLimits) {
	k.t.Helper()
	m := manifest(k.t, kitchenDir)
	m.Name, m.Limits = name, &l
	if _, err := k.h.AddPlugin(context.Background(), guest(k.t, kitchenDir), m); err != nil {
		k.t.Fatal(err)
	}
}

func TestHostileGuestsLeaveTheHostServing(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		k.tight("kitchen-tight", host.ManifestLimits{CPUMs: 500, MemoryMiB: 64})
		// Filling 64 MiB can take longer than 500 ms on a loaded machine:
		// the memory test gets time enough to reach its limit first.
		k.tight("kitchen-oom", host.ManifestLimits{CPUMs: 10000, MemoryMiB: 64})
		ctx := context.Background()

		// The hostile runs spin and allocate while ordinary runs go on.
		var wg sync.WaitGroup
		results := map[string]host.RunInfo{}
		var mu sync.Mutex
		for _, mode := range []string{"loop", "oom", "step-loop"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tool := "kitchen-tight"
				if mode == "oom" {
					tool = "kitchen-oom"
				}
				ri, err := k.h.Call(ctx, tool, json.RawMessage(`{"mode":"`+mode+`"}`), nil)
				if err != nil {
					t.Errorf("%s: %v", mode, err)
				}
				mu.Lock()
				results[mode] = ri
				mu.Unlock()
			}()
		}
		for range 3 {
			if got := result[int](t, k.run(`{"mode":"steps","n":5}`)); got != 10 {
				t.Errorf("ordinary run: %d", got)
			}
		}
		wg.Wait()
		if ri := results["loop"]; !errors.Is(ri.Err(), host.ErrCPULimit) {
			t.Errorf("loop: %+v (%v)", ri, ri.Err())
		}
		if ri := results["oom"]; !errors.Is(ri.Err(), host.ErrMemoryLimit) {
			t.Errorf("oom: %+v (%v)", ri, ri.Err())
		}
		// A step that spins fails its attempt with the CPU limit; the body sees
		// the error.
		if got := result[map[string]string](t, results["step-loop"]); got["type"] != abi.ErrTypeCPULimit {
			t.Errorf("step-loop: %v", got)
		}
		// Still serving.
		if got := result[int](t, k.run(`{"mode":"count","token":"after"}`)); got != 1 {
			t.Errorf("after the hostile runs: %d", got)
		}
	})
}

// Hand-assembled guests that spin and grow without any runtime in the way.
func TestHostileRawModules(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		schema := json.RawMessage(`{"type":"object"}`)
		add := func(name string, wasm []byte, l host.ManifestLimits) {
			t.Helper()
			if _, err := f.h.AddPlugin(ctx, wasm, host.Manifest{Name: name, Entry: "execute", InputSchema: schema, Limits: &l}); err != nil {
				t.Fatal(err)
			}
		}
		add("spin", wasmtest.Guest(wasmtest.Loop), host.ManifestLimits{CPUMs: 200})
		add("grow", wasmtest.Guest(wasmtest.GrowLoop), host.ManifestLimits{MemoryMiB: 2})
		if ri := f.call("spin", `{}`); !errors.Is(ri.Err(), host.ErrCPULimit) {
			t.Errorf("spin: %+v", ri)
		}
		if ri := f.call("grow", `{}`); !errors.Is(ri.Err(), host.ErrMemoryLimit) {
			t.Errorf("grow: %+v", ri)
		}
	})
}

func TestUploadRefusals(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, &host.Options{MaxModuleBytes: 8 << 20})
		ctx := context.Background()
		good := guest(t, kitchenDir)
		m := manifest(t, kitchenDir)
		env := wasmtest.Import{Module: "env", Name: "evil", Results: []byte{wasmtest.I32}}
		wrongSig := wasmtest.Import{Module: "sandflow", Name: "op", Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}}
		noVersion := wasmtest.Module{
			Funcs:   []wasmtest.Func{{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne}},
			Exports: map[string]uint32{"sandflow_run": 0, "sandflow_step": 0},
			Memory:  1,
		}.Bytes()
		version2 := wasmtest.Module{
			Funcs: []wasmtest.Func{
				{Results: []byte{wasmtest.I32}, Body: []byte{0x41, 0x02}},
				{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
			},
			Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 1, "sandflow_step": 1},
			Memory:  1,
		}.Bytes()
		badPrepare := wasmtest.Module{
			Funcs:   []wasmtest.Func{{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne}},
			Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 0, "sandflow_step": 0, "sandflow_prepare": 0},
			Memory:  1,
		}.Bytes()
		for _, tc := range []struct {
			name, reason, detail string
			wasm                 []byte
		}{
			{"not wasm", "not_wasm", "not a WebAssembly module", []byte("#!/bin/sh\necho hello\n")},
			{"empty", "not_wasm", "", nil},
			{"truncated", "malformed", "", good[:len(good)/2]},
			{"disallowed import", "import", "env.evil", wasmtest.Guest(wasmtest.ReturnOne, env)},
			{"wrong ABI signature", "import", "sandflow.op", wasmtest.Guest(wasmtest.ReturnOne, wrongSig)},
			{"no ABI version export", "abi_version", "sandflow_abi_version", noVersion},
			{"wrong ABI version", "abi_version", "version 2", version2},
			{"sandflow_prepare of the wrong type", "missing_export", "sandflow_prepare has type () -> (i32), want () -> ()", badPrepare},
			{"over the size cap", "too_large", "over the limit", make([]byte, 9<<20)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := f.h.AddPlugin(ctx, tc.wasm, m)
				var pe *host.PluginError
				if !errors.As(err, &pe) || !errors.Is(err, host.ErrBadPlugin) {
					t.Fatalf("want a *PluginError, got %v", err)
				}
				if pe.Reason != tc.reason || !strings.Contains(pe.Detail, tc.detail) {
					t.Errorf("reason %q detail %q; want %q containing %q", pe.Reason, pe.Detail, tc.reason, tc.detail)
				}
			})
		}
		bad := func(mut func(*host.Manifest)) host.Manifest {
			c := m
			mut(&c)
			return c
		}
		for name, bm := range map[string]host.Manifest{
			"bad name": bad(func(m *host.Manifest) { m.Name = "no spaces allowed" }),
			"serve with taskId": bad(func(m *host.Manifest) {
				m.Entry, m.InputSchema = "serve", json.RawMessage(`{"type":"object","properties":{"taskId":{"type":"string"}}}`)
			}),
			"unknown entry":      bad(func(m *host.Manifest) { m.Entry = "stream" }),
			"no entry":           bad(func(m *host.Manifest) { m.Entry = "" }),
			"schema not JSON":    bad(func(m *host.Manifest) { m.InputSchema = json.RawMessage(`{"type":`) }),
			"schema bad keyword": bad(func(m *host.Manifest) { m.InputSchema = json.RawMessage(`{"type":"object","minProperties":"x"}`) }),
			"schema remote ref": bad(func(m *host.Manifest) {
				m.InputSchema = json.RawMessage(`{"type":"object","$ref":"file:///etc/passwd"}`)
			}),
			"schema not object": bad(func(m *host.Manifest) { m.InputSchema = json.RawMessage(`{"type":"string"}`) }),
			"limit over host":   bad(func(m *host.Manifest) { m.Limits = &host.ManifestLimits{MemoryMiB: 1 << 20} }),
		} {
			t.Run(name, func(t *testing.T) {
				if _, err := f.h.AddPlugin(ctx, good, bm); !errors.Is(err, host.ErrBadManifest) {
					t.Errorf("want ErrBadManifest, got %v", err)
				}
			})
		}
		if ps, err := f.h.Plugins(ctx); err != nil || len(ps) != 0 {
			t.Errorf("refused uploads stored something: %v %v", ps, err)
		}
	})
}

func TestBadCallsChangeNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		ctx := context.Background()
		for name, tc := range map[string]struct {
			tool, input string
			want        error
		}{
			"malformed JSON": {"kitchen", `{"mode":`, host.ErrBadInput},
			"not an object":  {"kitchen", `[1,2]`, host.ErrBadInput},
			"schema":         {"kitchen", `{"mode":5}`, host.ErrBadInput},
			"missing field":  {"kitchen", `{}`, host.ErrBadInput},
			"unknown tool":   {"nope", `{}`, host.ErrUnknownTool},
		} {
			_, err := k.h.Call(ctx, tc.tool, json.RawMessage(tc.input), nil)
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: got %v, want %v", name, err, tc.want)
			}
		}
		_, err := k.h.Call(ctx, "kitchen", json.RawMessage(`{"mode":5,"n":-1}`), nil)
		var ie *host.InputError
		if !errors.As(err, &ie) || len(ie.Problems) != 2 {
			t.Errorf("want two problems in an *InputError, got %v", err)
		}
		if _, err := k.h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"x"}`), &host.CallOptions{RunID: "bad id with spaces"}); !errors.Is(err, host.ErrBadInput) {
			t.Errorf("bad run id: %v", err)
		}
		if runs, _ := k.h.Runs(ctx, store.RunFilter{}); len(runs) != 0 {
			t.Errorf("bad calls created runs: %+v", runs)
		}
		// Defaults from the schema are filled in before the run starts.
		ri := k.run(`{"mode":"metadata"}`)
		evs, _ := k.h.Events(ctx, ri.ID)
		var created struct{ Input map[string]any }
		json.Unmarshal(evs[0].Data, &created)
		if created.Input["n"] != float64(3) || created.Input["text"] != "hello" {
			t.Errorf("defaults not filled: %v", created.Input)
		}
		// Operations on a run that ended.
		if _, err := k.h.Cancel(ctx, ri.ID, ""); !errors.Is(err, host.ErrRunEnded) {
			t.Errorf("cancel an ended run: %v", err)
		}
		if _, err := k.h.Run(ctx, "run_missing"); !errors.Is(err, host.ErrRunNotFound) {
			t.Errorf("missing run: %v", err)
		}
	})
}

func TestLimits(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		k.tight("kitchen-small", host.ManifestLimits{PayloadBytes: 4096, Events: 40, OutputBytes: 100})
		call := func(in string) host.RunInfo { return k.call("kitchen-small", in) }
		if got := result[map[string]string](t, call(`{"mode":"big-progress","n":5000}`)); got["type"] != abi.ErrTypeTooLarge {
			t.Errorf("big progress: %v", got)
		}
		if ri := call(`{"mode":"big-result","n":5000}`); ri.Status != store.StatusFailed || ri.Error.Type != abi.ErrTypeTooLarge || !strings.Contains(ri.Error.Message, "over the limit") {
			t.Errorf("big result: %+v", ri)
		}
		if got := result[map[string]string](t, call(`{"mode":"big-step-result","n":5000}`)); got["type"] != abi.ErrTypeTooLarge {
			t.Errorf("big step result: %v", got)
		}
		if ri := call(`{"mode":"many-progress","n":100}`); !errors.Is(ri.Err(), host.ErrLimit) {
			t.Errorf("too many events: %+v", ri)
		}
		if _, err := k.h.Call(context.Background(), "kitchen-small", json.RawMessage(`{"mode":"x","text":"`+strings.Repeat("z", 5000)+`"}`), nil); !errors.Is(err, host.ErrLimit) {
			t.Errorf("big input: %v", err)
		}
		// Output is recorded once, up to the cap, even across a replay.
		k2 := newKitchen(t, &host.Options{MaxWarm: -1})
		k2.tight("kitchen-small", host.ManifestLimits{OutputBytes: 100})
		ri := k2.call("kitchen-small", `{"mode":"print","n":30,"text":"0123456789","ms":10}`)
		ri = k2.settle(ri.ID, 10e9)
		if ri.Status != store.StatusCompleted {
			t.Fatalf("%+v", ri)
		}
		evs, _ := k2.h.Events(context.Background(), ri.ID)
		var total int
		cut := false
		for _, e := range evs {
			if e.Kind == host.EvOutput {
				var d struct {
					Data string
					Cut  bool
				}
				json.Unmarshal(e.Data, &d)
				total += len(d.Data)
				cut = cut || d.Cut
			}
		}
		if total != 100 || !cut {
			t.Errorf("recorded %d bytes of output (cut %v), want 100 and cut", total, cut)
		}
	})
}
