package host

import (
	"context"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// timedOps wraps an OpHandler and splits a replay's time between the host
// (inside Op) and the guest (between Ops).
type timedOps struct {
	inner     OpHandler
	last      time.Time
	host      time.Duration
	guest     time.Duration
	ops       int
	firstSeen bool
}

func (t *timedOps) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	now := time.Now()
	if t.firstSeen {
		t.guest += now.Sub(t.last)
	}
	t.firstSeen = true
	b, err := t.inner.Op(ctx, kind, name, payload)
	t.last = time.Now()
	t.host += t.last.Sub(now)
	t.ops++
	return b, err
}

// BenchmarkReplayBreakdown replays a 1,000-step history and reports how
// its time divides between host (answering ops from the log) and guest
// (the SDK and the body between ops), per op.
func BenchmarkReplayBreakdown(b *testing.B) {
	h, lp := benchHost(b, nil)
	rs := stepsHistory(b, h, 1000)
	ctx := context.Background()
	var host, guest time.Duration
	ops := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w := &wfInstance{h: h, rs: rs, plugin: lp, limits: lp.limits, checkOnly: true, rng: newRNG(rs)}
		t := &timedOps{inner: w}
		w.clock.advance(rs.Start)
		inst, err := lp.cm.Instantiate(ctx, InstanceConfig{Clock: &w.clock, Random: w.rng, Stdout: outWriter{w, "stdout"}, Stderr: outWriter{w, "stderr"},
			MemoryLimit: lp.limits.MemoryBytes, CPULimit: lp.limits.CPUTime, Ops: t})
		if err != nil {
			b.Fatal(err)
		}
		w.inst = inst
		w.begin(nil)
		b.StartTimer()
		if res, err := inst.Call(ctx, abi.RunExport); err != nil || res != abi.RunDone {
			b.Fatal(res, err)
		}
		b.StopTimer()
		host, guest, ops = host+t.host, guest+t.guest, ops+t.ops
		inst.Close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(host.Nanoseconds())/float64(ops), "host-ns/op")
	b.ReportMetric(float64(guest.Nanoseconds())/float64(ops), "guest-ns/op")
}
