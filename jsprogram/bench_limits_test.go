package jsprogram_test

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/jsprogram"
)

// statusBytes reads a size field (kB) of /proc/self/status; 0 where
// there is none.
func statusBytes(field string) int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(field)); ok {
			if f := bytes.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(string(f[0]), 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// A program that sends 100 messages of 1 MB to an echoing agent at once
// and fans in the 100 replies of 1 MB: the time from start to result, and
// the host process's peak resident memory meanwhile (VmHWM, reset before
// each run where the kernel allows; Linux only).
func BenchmarkFanOut100x1MBHostPeakRSS(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	f.run(`return 1;`)
	js := `const m = "x".repeat(1000000 - 40); const ps = []; for (let i = 0; i < 100; i++) ps.push(ctx.agent("echo", { message: m }));
const rs = await Promise.all(ps); return rs.reduce((n, r) => n + r.length, 0);`
	var peak int64
	for b.Loop() {
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
		ri := f.run(js)
		if string(ri.Result) != "99996600" {
			b.Fatalf("%s %s %+v", ri.Status, ri.Result, ri.Error)
		}
		peak = max(peak, statusBytes("VmHWM:"))
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-host-rss-MiB")
}

// The latency of a program that returns at once, started while six
// endless loops run on the engine's default workers (each loop stops at a
// JavaScript time of 20 s; the calls start 2 s after the loops).
func BenchmarkShortCallWhileSixLoopsSpin(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{JSTime: 20 * time.Second, TotalTime: time.Minute}, nil)
	f.run(`return 1;`)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(`for (;;) {}`) }()
	}
	time.Sleep(2 * time.Second)
	b.ResetTimer()
	for b.Loop() {
		if ri := f.run(`return 6 * 7;`); string(ri.Result) != "42" {
			b.Fatalf("%s %s", ri.Status, ri.Result)
		}
	}
	b.StopTimer()
	wg.Wait()
}
