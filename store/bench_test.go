package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/pagecheck"
)

// stepBatch is what one host step typically commits: two events.
func stepBatch(last uint64) Batch {
	data := []byte(fmt.Sprintf(`{"step":%d,"output":%q}`, last, strings.Repeat("x", 120)))
	return Batch{Events: []Event{
		{Seq: last + 1, Time: time.Unix(1750000000, int64(last)), Kind: "step.started", Data: data},
		{Seq: last + 2, Time: time.Unix(1750000000, int64(last)+1), Kind: "step.finished", Data: data},
	}}
}

func benchAppendStep(b *testing.B, opts Options) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), &opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.CreateRun(ctx, Run{ID: "bench", Status: StatusRunning}, Batch{}); err != nil {
		b.Fatal(err)
	}
	var last uint64
	commits := 0
	for b.Loop() {
		if err := s.Append(ctx, "bench", last, stepBatch(last)); err != nil {
			b.Fatal(err)
		}
		last += 2
		commits++
	}
	b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "commits/s")
	if r, err := s.Run(ctx, "bench"); err != nil || r.LastSeq != last {
		b.Fatalf("after the benchmark: LastSeq %d, %v; want %d", r.LastSeq, err, last)
	}
}

// BenchmarkAppendStep appends a 2-event batch per commit with fsync on.
func BenchmarkAppendStep(b *testing.B) { benchAppendStep(b, Options{}) }

// BenchmarkAppendStepNoSync is the same without fsync.
func BenchmarkAppendStepNoSync(b *testing.B) { benchAppendStep(b, Options{NoSync: true}) }

// BenchmarkEventsRead1000 reads the 1000 events of one run.
func BenchmarkEventsRead1000(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.CreateRun(ctx, Run{ID: "bench", Status: StatusRunning}, Batch{}); err != nil {
		b.Fatal(err)
	}
	for last := uint64(0); last < 1000; last += 2 {
		if err := s.Append(ctx, "bench", last, stepBatch(last)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		evs, err := s.Events(ctx, "bench", 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) != 1000 {
			b.Fatalf("read %d events", len(evs))
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendStepParallel is BenchmarkAppendStep from 16 goroutines,
// each appending to its own run, with fsync on: what a host with many
// runs moving at once gets from one sync serving the writes that queued
// behind it.
func BenchmarkAppendStepParallel(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), &Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("bench-%d", next.Add(1))
		if err := s.CreateRun(ctx, Run{ID: id, Status: StatusRunning}, Batch{}); err != nil {
			b.Error(err)
			return
		}
		var last uint64
		for pb.Next() {
			if err := s.Append(ctx, id, last, stepBatch(last)); err != nil {
				b.Error(err)
				return
			}
			last += 2
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkCheckFileOpen times the page check Open makes before bbolt
// reads a file (pagecheck.File), on a store of 10,000 events of about 200
// bytes: the cost of checking every reachable page at each open.
func BenchmarkCheckFileOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateRun(ctx, Run{ID: "bench", Status: StatusRunning}, Batch{}); err != nil {
		b.Fatal(err)
	}
	for last := uint64(0); last < 10000; last += 2 {
		if err := s.Append(ctx, "bench", last, stepBatch(last)); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	size, _ := pagecheck.Size(f)
	b.SetBytes(size)
	for b.Loop() {
		if _, err := pagecheck.File(f, size, path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValueChecksum200B times sealing and checking one 200-byte
// value under an event key: what a checksum adds to each write and read.
func BenchmarkValueChecksum200B(b *testing.B) {
	k := eventKey("run_23ocxn7h22jpjsasuuvttr6rvq", 1234)
	v := bytes.Repeat([]byte("x"), 200)
	buf := make([]byte, 0, 256)
	for b.Loop() {
		sv := integrity.Seal(buf[:0], bucketEvents, k, v)
		if _, err := integrity.Open(bucketEvents, k, sv); err != nil {
			b.Fatal(err)
		}
	}
}
