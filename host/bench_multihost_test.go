package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// BenchmarkDurableStep times one step of a run, executed and committed
// durably (its start and its completion, each acknowledged once on
// disk), on hosts with the defaults a user gets: one host on the embedded
// store (fsync on), and one and three hosts on one PostgreSQL database
// (16 connections each, synchronous_commit on, leases held and renewed,
// schedulers claiming). Runs of up to 50 steps (kitchen's "steps" mode,
// fewer when b.N/runs is less) are called from 1 or 64 goroutines at
// once, spread over the hosts; ns/op is
// wall time over all steps, so with 64 runs it is the inverse of the
// throughput. Compare with
//
//	benchstat -col /store file
func BenchmarkDurableStep(b *testing.B) {
	for _, runs := range []int{1, 64} {
		for _, st := range []struct {
			name  string
			hosts int
		}{{"bbolt", 1}, {"postgres-1host", 1}, {"postgres-3hosts", 3}} {
			b.Run(fmt.Sprintf("runs=%d/store=%s", runs, st.name), func(b *testing.B) {
				var hosts []*host.Host
				if st.name == "bbolt" {
					s, err := store.Open(filepath.Join(b.TempDir(), "sandflow.db"), nil)
					if err != nil {
						b.Fatal(err)
					}
					h, err := host.Open(context.Background(), s, &host.Options{Engine: sharedEngine(b)})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					defer h.Close(context.Background())
					if _, err := h.AddPlugin(context.Background(), guest(b, kitchenDir), manifest(b, kitchenDir)); err != nil {
						b.Fatal(err)
					}
					hosts = []*host.Host{h}
				} else {
					hosts = newCluster(b, st.hosts, nil).hosts
				}
				benchSteps(b, hosts, runs)
			})
		}
	}
}

func benchSteps(b *testing.B, hosts []*host.Host, runs int) {
	// Every goroutine has work: with 64 runs, runs of b.N/64 steps.
	perRun := int64(max(1, min(50, b.N/runs)))
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hosts[i%len(hosts)]
			for {
				k := next.Add(perRun) - perRun
				if k >= int64(b.N) {
					return
				}
				n := min(perRun, int64(b.N)-k)
				ri, err := h.Call(context.Background(), "kitchen", json.RawMessage(fmt.Sprintf(`{"mode":"steps","n":%d}`, n)), nil)
				if err != nil || ri.Status != store.StatusCompleted {
					b.Errorf("call: %+v, %v", ri, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkFailover times, with the default lease (1.5 s) and claim scan
// (250 ms), how long a run waits after its host is killed in the middle of
// a step (its connections gone, its lease neither renewed nor released)
// until another host of three has claimed it and recorded the cut-off
// attempt: the kill to that commit, seen by a watcher on the new host.
func BenchmarkFailover(b *testing.B) {
	c := newCluster(b, 3, nil)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		key := fmt.Sprintf("failover-%d", i)
		id := "run-" + key
		release := c.block(key)
		a := c.host(0)
		go a.Call(ctx, "kitchen", json.RawMessage(fmt.Sprintf(`{"mode":"count","token":%q}`, key)), &host.CallOptions{RunID: id})
		<-c.entered
		c.mu.Lock()
		delete(c.blocked, key)
		c.mu.Unlock()
		watches := make(chan struct{}, 2)
		for _, j := range []int{1, 2} {
			w, stop := c.host(j).Watch(id)
			defer stop()
			go func() {
				for range w {
					select {
					case watches <- struct{}{}:
					default:
					}
				}
			}()
		}
		b.StartTimer()
		c.kill(0)
		for resumed := false; !resumed; {
			<-watches
			n := kinds(b, c.host(1), id)
			resumed = n[host.EvStepFailed] > 0
		}
		b.StopTimer()
		release()
		c.open(0)
		waitRun(b, c.host(1), id, 30*time.Second, func(ri host.RunInfo) bool { return ri.Status.Terminal() })
	}
}

// BenchmarkResumeAfterAnswer times an answer to a run's question until
// the run, resumed by it, has completed and its last commit returned: on
// the host that asked (its instance parked there), and on another host of
// three (which takes the lease, reads the run from the database and
// replays it), with the defaults and with PreInit 1 (an initialised
// instance kept ready, which the replay then need not make). The
// difference is what answering on another host costs beyond the commit.
func BenchmarkResumeAfterAnswer(b *testing.B) {
	for _, where := range []string{"same-host", "other-host", "other-host-preinit"} {
		b.Run("on="+where, func(b *testing.B) {
			var opts host.Options
			if where == "other-host-preinit" {
				opts.PreInit = 1
			}
			c := newCluster(b, 3, &opts)
			ctx := context.Background()
			answer := func(i int, timed bool) {
				ri, err := c.host(0).Call(ctx, "kitchen", json.RawMessage(`{"mode":"ask-text"}`), nil)
				if err != nil || len(ri.Waiting) != 1 {
					b.Fatalf("call: %+v, %v", ri, err)
				}
				h := c.host(0)
				if where != "same-host" {
					h = c.host(1 + i%2)
				}
				if timed {
					b.StartTimer()
				}
				done, err := h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{Text: "yes"})
				b.StopTimer()
				if err != nil || done.Status != store.StatusCompleted {
					b.Fatalf("answer: %+v, %v", done, err)
				}
			}
			// Each host has loaded (compiled) the plugin before the timing.
			answer(0, false)
			answer(1, false)
			b.ResetTimer()
			b.StopTimer()
			for i := range b.N {
				answer(i, true)
			}
		})
	}
}
