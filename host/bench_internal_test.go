package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"github.com/sandflow/sandflow/host/internal/state"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// benchHost opens a host on a fresh store with the kitchen guest.
func benchHost(b testing.TB, opts *Options) (*Host, *loadedPlugin) {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(filepath.Join(b.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	h, err := Open(ctx, st, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(ctx); st.Close() })
	root, err := guestbuild.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(root, "host/testdata/guests/kitchen")
	wasm := guestbuild.MustRead(dir)
	m := Manifest{Name: "kitchen", Entry: EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`), Capabilities: []string{"count"}}
	if _, err := h.AddPlugin(ctx, wasm, m); err != nil {
		b.Fatal(err)
	}
	lp, err := h.plugin(ctx, "kitchen", 0)
	if err != nil {
		b.Fatal(err)
	}
	return h, lp
}

// stepsHistory runs the kitchen guest through n sequential steps and
// returns the completed run's state.
func stepsHistory(b testing.TB, h *Host, n int) *state.Run {
	b.Helper()
	ctx := context.Background()
	ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":`+itoa(n)+`}`), nil)
	if err != nil || ri.Status != store.StatusCompleted {
		b.Fatalf("%+v %v", ri, err)
	}
	var rs *state.Run
	if _, err := h.withRun(ctx, ri.ID, func(rh *runHandle) error { rs = rh.rs; return nil }); err != nil {
		b.Fatal(err)
	}
	return rs
}

func itoa(n int) string { return string(json.RawMessage(mustJSON(n))) }

// BenchmarkReplayOpHost is the host's share of one op round trip on the
// replay path: the guest asks for a recorded step and gets its answer from
// the log (the wazero host call itself adds some 60-80 ns).
func BenchmarkReplayOpHost(b *testing.B) {
	h, lp := benchHost(b, nil)
	rs := stepsHistory(b, h, 1000)
	w := &wfInstance{h: h, rs: rs, plugin: lp, limits: lp.limits, checkOnly: true}
	name := []byte("echo")
	payload := []byte(`{"input":1}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := uint32(i%1000) + 1
		w.cursor, w.act = p-1, rs.Op(p).Act
		body, err := w.Op(ctx, abi.OpStep, name, payload)
		if err != nil || len(body) < 8 {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay1000Steps replays a 1,000-step history in an instance
// that is already instantiated: 1,000 step ops and 1,000 awaits answered
// from the log, through the guest SDK's encoding and decoding.
func BenchmarkReplay1000Steps(b *testing.B) {
	h, lp := benchHost(b, nil)
	rs := stepsHistory(b, h, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, err := h.newWorkflowInstance(ctx, rs, lp, true)
		if err != nil {
			b.Fatal(err)
		}
		w.begin(nil)
		b.StartTimer()
		res, err := w.inst.Call(ctx, abi.RunExport)
		b.StopTimer()
		if err != nil || res != abi.RunDone || w.cursor != uint32(len(rs.Ops)) {
			b.Fatalf("replay: res %d err %v cursor %d of %d", res, err, w.cursor, len(rs.Ops))
		}
		w.close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/step")
}

// BenchmarkInstantiate is the cost of a fresh workflow instance of a Go
// guest: instantiation, _initialize and the ABI version check.
func BenchmarkInstantiate(b *testing.B) {
	h, lp := benchHost(b, nil)
	rs := stepsHistory(b, h, 1)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w, err := h.newWorkflowInstance(ctx, rs, lp, true)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		w.close(ctx)
		b.StartTimer()
	}
}

// BenchmarkLiveStep is one step done live, end to end: the op recorded,
// the activation committed, the step run in a step instance, its result
// committed, and the warm workflow instance resumed. The store does not
// fsync (see the store's BenchmarkAppendStep for the cost of a durable
// commit).
func BenchmarkLiveStep(b *testing.B) {
	h, _ := benchHost(b, nil)
	ctx := context.Background()
	b.ResetTimer()
	ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":`+itoa(b.N)+`}`), nil)
	if err != nil || ri.Status != store.StatusCompleted {
		b.Fatalf("%+v %v", ri, err)
	}
}

// BenchmarkResumeByReplay100 is a resume on a fresh instance of a run with a
// 100-step history: instantiate, replay 100 steps, reach the new ground.
func BenchmarkResumeByReplay100(b *testing.B) {
	h, lp := benchHost(b, nil)
	rs := stepsHistory(b, h, 100)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w, err := h.newWorkflowInstance(ctx, rs, lp, true)
		if err != nil {
			b.Fatal(err)
		}
		w.begin(nil)
		if res, err := w.inst.Call(ctx, abi.RunExport); err != nil || res != abi.RunDone {
			b.Fatal(res, err)
		}
		w.close(ctx)
	}
}

// BenchmarkHistoryState is the log-reading part of a replay check: a
// 10,000-step history's events decoded into a run state.
func BenchmarkHistoryState(b *testing.B) {
	h, _ := benchHost(b, nil)
	rs := stepsHistory(b, h, 10000)
	var buf bytes.Buffer
	if err := h.ExportHistory(context.Background(), rs.ID, &buf); err != nil {
		b.Fatal(err)
	}
	hist, err := ReadHistory(&buf)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := historyState(hist); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(hist.Events)), "ns/event")
}

// BenchmarkReplayStepsHost is the host's share of replaying a run of
// sequential steps, without a guest: each step op sent with the await
// flag, as the Go SDK's Step.Run sends it, answered from the log after
// moving to the activation where its result became visible.
func BenchmarkReplayStepsHost(b *testing.B) {
	h, lp := benchHost(b, nil)
	const n = 1000
	rs := stepsHistory(b, h, n)
	name := []byte("echo")
	payload := []byte(`{"input":1}`)
	ctx := engine.WithCaller(context.Background(), &budgetStub{})
	b.ReportAllocs()
	for b.Loop() {
		w := &wfInstance{h: h, rs: rs, plugin: lp, limits: lp.limits, checkOnly: true}
		for p := uint32(1); p <= n; p++ {
			body, err := w.Op(ctx, abi.OpStep|abi.OpFlagAwait, name, payload)
			if err != nil || len(body) < abi.BodyHeaderSize || abi.Status(binary.LittleEndian.Uint32(body)) != abi.StatusOK {
				b.Fatalf("op %d: %q %v", p, body, err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/step")
}

// budgetStub is a CPU budget that costs what an engine's does: nothing
// but a field or two to set.
type budgetStub struct{ restarts, renewals int }

func (b *budgetStub) RestartCPU()      { b.restarts++ }
func (b *budgetStub) RenewCPU()        { b.renewals++ }
func (b *budgetStub) PauseCPU() func() { return func() {} }
