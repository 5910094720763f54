package postgres

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// benchStep is what one host step commits: a batch of two events.
func benchStep(last uint64) store.Batch {
	data := []byte(fmt.Sprintf(`{"step":%d,"output":%q}`, last, strings.Repeat("x", 120)))
	return store.Batch{Events: []store.Event{
		{Seq: last + 1, Time: time.Unix(1750000000, int64(last)), Kind: "step.started", Data: data},
		{Seq: last + 2, Time: time.Unix(1750000000, int64(last)+1), Kind: "step.finished", Data: data},
	}}
}

// BenchmarkStepCommit times one durable step commit (Append of a 2-event
// batch, returned once on disk) on the embedded store (fsync on) and on
// PostgreSQL (synchronous_commit on, a pool of 16 connections), with 1
// run and with 64 runs appending at once, each from its own goroutine;
// ns/op is wall time over all commits, so with 64 runs it is the inverse
// of the throughput, not one commit's latency. Compare the stores with
//
//	benchstat -col /store file
func BenchmarkStepCommit(b *testing.B) {
	for _, runs := range []int{1, 64} {
		for _, kind := range []string{"bolt", "postgres"} {
			b.Run(fmt.Sprintf("runs=%d/store=%s", runs, kind), func(b *testing.B) {
				var s store.Store
				switch kind {
				case "bolt":
					bs, err := store.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
					if err != nil {
						b.Fatal(err)
					}
					s = bs
				case "postgres":
					s = openSchema(b, newSchema(b), Options{MaxConns: 16})
				}
				defer s.Close()
				benchCommits(b, s, runs)
			})
		}
	}
}

func benchCommits(b *testing.B, s store.Store, runs int) {
	for i := range runs {
		if err := s.CreateRun(ctxBG, store.Run{ID: fmt.Sprintf("bench-%d", i), Status: store.StatusRunning}, store.Batch{}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bench-%d", i)
			var last uint64
			for next.Add(1) <= int64(b.N) {
				if err := s.Append(ctxBG, id, last, benchStep(last)); err != nil {
					b.Error(err)
					return
				}
				last += 2
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkStepCommitNotices times the step commit of BenchmarkStepCommit
// on PostgreSQL with Options.CommitNotices off and on (a NOTIFY in each
// Append's transaction), nobody listening. Compare with
//
//	benchstat -col /notices file
func BenchmarkStepCommitNotices(b *testing.B) {
	for _, runs := range []int{1, 64} {
		for _, on := range []bool{false, true} {
			name := map[bool]string{false: "off", true: "on"}[on]
			b.Run(fmt.Sprintf("runs=%d/notices=%s", runs, name), func(b *testing.B) {
				s := openSchema(b, newSchema(b), Options{MaxConns: 16, CommitNotices: on})
				benchCommits(b, s, runs)
			})
		}
	}
}
