package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

var multihostRuns = flag.Int("multihost.runs", 12, "runs TestMultiHostSoak drives (-multihost.runs=200 for the full soak)")

// Three hosts on one database drive runs that each take a step, sleep,
// ask, wait on a hook and take a step, while hosts are killed (as a crash
// would: their leases neither renewed nor released) and reopened at
// random, and the test answers and resumes each run on whichever host is
// up. Then: every run completed, once; every answer and hook delivery a
// host acknowledged is in the log; no step ran more times than attempts
// were recorded; no timer fired twice; the epochs of each run's log never
// go down.
func TestMultiHostSoak(t *testing.T) {
	c := newCluster(t, 3, nil)
	n := *multihostRuns
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 24))
	var rmu sync.Mutex
	pick := func() *host.Host {
		rmu.Lock()
		defer rmu.Unlock()
		for range 8 {
			if h := c.host(rng.IntN(len(c.hosts))); h != nil {
				return h
			}
		}
		return nil
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("soak-%03d", i)
	}

	// Chaos: a host down at a time, at most, for a while.
	stop := make(chan struct{})
	var kills atomic.Int64
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		crng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(300+crng.IntN(700)) * time.Millisecond):
			}
			i := crng.IntN(len(c.hosts))
			if crng.IntN(4) == 0 {
				c.close(i)
			} else {
				c.kill(i)
			}
			kills.Add(1)
			time.Sleep(time.Duration(100+crng.IntN(500)) * time.Millisecond)
			c.open(i)
		}
	}()

	type acks struct{ started, answered, hooks int }
	acked := map[string]*acks{}
	for _, id := range ids {
		acked[id] = &acks{}
	}
	done := map[string]bool{}
	deadline := time.Now().Add(time.Duration(60+n) * time.Second)
	for len(done) < n {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("after %s, %d of %d runs completed", time.Duration(60+n)*time.Second, len(done), n)
		}
		for _, id := range ids {
			if done[id] {
				continue
			}
			h := pick()
			if h == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			a := acked[id]
			if a.started == 0 {
				_, err := h.Start(ctx, "kitchen", json.RawMessage(fmt.Sprintf(`{"mode":"multihost","token":%q,"ms":300}`, id)), &host.CallOptions{RunID: id})
				if err == nil || errors.Is(err, host.ErrRunExists) {
					a.started = 1
				}
				cancel()
				continue
			}
			ri, err := h.Run(ctx, id)
			if err != nil {
				cancel()
				continue
			}
			switch {
			case ri.Status == store.StatusCompleted:
				done[id] = true
			case ri.Status.Terminal():
				cancel()
				close(stop)
				t.Fatalf("run %s %s: %+v", id, ri.Status, ri.Error)
			case ri.Status == store.StatusWaiting && len(ri.Waiting) > 0:
				switch w := ri.Waiting[0]; w.Kind {
				case "ask":
					if _, err := h.AnswerAsk(ctx, w.AskID, host.Answer{Text: "yes"}); err == nil {
						a.answered++
					}
				case "hook":
					if _, err := h.ResumeHook(ctx, id, json.RawMessage(`{"from":"soak"}`)); err == nil {
						a.hooks++
					}
				}
			}
			cancel()
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	<-chaosDone
	h := pick()
	for _, id := range ids {
		evs, err := h.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		k := map[string]int{}
		for _, e := range evs {
			k[e.Kind]++
		}
		a := acked[id]
		ran := c.count.get(id+"/1") + c.count.get(id+"/2")
		switch {
		case k[host.EvRunCompleted] != 1:
			t.Errorf("run %s completed %d times", id, k[host.EvRunCompleted])
		case k[host.EvTimerFired] != 1:
			t.Errorf("run %s: its sleep fired %d times", id, k[host.EvTimerFired])
		case k[host.EvAskSettled] != 1 || a.answered > 1:
			t.Errorf("run %s: %d answers acknowledged, %d settled", id, a.answered, k[host.EvAskSettled])
		case k[host.EvHookReceived] < a.hooks || k[host.EvHookReceived] < 1:
			t.Errorf("run %s: %d hook deliveries acknowledged, %d in the log", id, a.hooks, k[host.EvHookReceived])
		case ran < 2 || ran > k[host.EvStepStarted]:
			t.Errorf("run %s: the steps ran %d times, %d attempts recorded", id, ran, k[host.EvStepStarted])
		}
	}
	// The epochs of each run's log, in seq order, never go down.
	conn, err := pgx.Connect(context.Background(), c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var bad int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT epoch < lag(epoch) OVER (PARTITION BY run_id ORDER BY seq) AS down FROM events) e WHERE down`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d events have an epoch below the one before", bad)
	}
	t.Logf("%d runs completed with %d hosts killed or stopped and restarted", n, kills.Load())
}

// SANDFLOW_TEST_POSTGRES_RESTART, when set, is the command that restarts
// the test server (pg_ctlcluster 15 main restart). Three hosts drive a
// run that sleeps across the restart; they reconnect, one fires the
// timer, the question asked after it is answered and the hook resumed on
// others, and the run completes once. It restarts the server every other
// test uses, so it runs only when asked.
func TestMultiHostDatabaseRestart(t *testing.T) {
	cmdline := os.Getenv("SANDFLOW_TEST_POSTGRES_RESTART")
	if cmdline == "" {
		t.Skip("SANDFLOW_TEST_POSTGRES_RESTART not set: this test restarts the server, set it to the command that does (pg_ctlcluster 15 main restart)")
	}
	c := newCluster(t, 3, nil)
	ctx := context.Background()
	ri, err := c.hosts[0].Call(ctx, "kitchen", json.RawMessage(`{"mode":"multihost","token":"restart","ms":2000}`), &host.CallOptions{RunID: "run-restart"})
	if err != nil || ri.Status != store.StatusWaiting {
		t.Fatalf("call: %+v, %v", ri, err)
	}
	if out, err := exec.Command("sh", "-c", cmdline).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	// The sleep fires on some host once it is due; then the question
	// (answered on B) and the hook (resumed on C).
	asked := waitRun(t, c.hosts[1], "run-restart", 60*time.Second, func(ri host.RunInfo) bool {
		return len(ri.Waiting) > 0 && ri.Waiting[0].Kind == "ask"
	})
	retry := func(what string, fn func() error) {
		t.Helper()
		var err error
		for range 50 {
			if err = fn(); err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: %v", what, err)
	}
	retry("answer on B", func() error {
		_, err := c.hosts[1].AnswerAsk(ctx, asked.Waiting[0].AskID, host.Answer{Text: "yes"})
		return err
	})
	waitRun(t, c.hosts[2], "run-restart", 30*time.Second, func(ri host.RunInfo) bool {
		return len(ri.Waiting) > 0 && ri.Waiting[0].Kind == "hook"
	})
	retry("resume on C", func() error {
		_, err := c.hosts[2].ResumeHook(ctx, "restart", json.RawMessage(`{}`))
		return err
	})
	done := waitRun(t, c.hosts[0], "run-restart", 30*time.Second, func(ri host.RunInfo) bool { return ri.Status.Terminal() })
	if done.Status != store.StatusCompleted {
		t.Fatalf("run %s: %+v", done.Status, done.Error)
	}
	n := kinds(t, c.hosts[0], "run-restart")
	if n[host.EvTimerFired] != 1 || n[host.EvRunCompleted] != 1 || n[host.EvAskSettled] != 1 {
		t.Errorf("log %v", n)
	}
}
