package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// expire makes a held lease expire at once, as if its host had stopped
// renewing it a while ago.
func expire(t *testing.T, s *Store, runID string, l store.Lease) {
	t.Helper()
	if err := s.RenewLease(ctxBG, runID, l, -time.Hour); err != nil {
		t.Fatalf("expire %v: %v", l, err)
	}
}

func leased(b store.Batch, l store.Lease) store.Batch {
	b.Lease = &l
	return b
}

// eventEpochs reads the epoch each of a run's events was written under,
// by seq, and who wrote it (the event data's "by").
func eventEpochs(t *testing.T, schema, runID string) (epochs []int64, by []string) {
	t.Helper()
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	rows, err := conn.Query(ctxBG, `SELECT epoch, coalesce(convert_from(data, 'UTF8')::jsonb ->> 'by', '') FROM `+pgx.Identifier{schema}.Sanitize()+`.events
WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		t.Fatal(err)
	}
	var e int64
	var w string
	if _, err := pgx.ForEachRow(rows, []any{&e, &w}, func() error {
		epochs, by = append(epochs, e), append(by, w)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return epochs, by
}

func TestLeaseFencesAppends(t *testing.T) {
	schema := newSchema(t)
	a := openSchema(t, schema, Options{})
	b := openSchema(t, schema, Options{})
	mustCreate(t, a, "r")
	la, err := a.AcquireLease(ctxBG, "r", "A", time.Hour)
	if err != nil || la.Epoch != 1 {
		t.Fatalf("AcquireLease A = %v, %v; want epoch 1", la, err)
	}
	if _, err := b.AcquireLease(ctxBG, "r", "B", time.Hour); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease B while A holds it = %v, want ErrLeaseHeld", err)
	}
	if err := a.Append(ctxBG, "r", 0, leased(step(0), la)); err != nil {
		t.Fatalf("Append under A's lease: %v", err)
	}
	// A stops renewing; B takes the run over.
	expire(t, a, "r", la)
	lb, err := b.AcquireLease(ctxBG, "r", "B", time.Hour)
	if err != nil || lb.Epoch != 2 {
		t.Fatalf("AcquireLease B after expiry = %v, %v; want epoch 2", lb, err)
	}
	if err := a.Append(ctxBG, "r", 2, leased(step(2), la)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Append under A's taken lease = %v, want ErrLeaseLost", err)
	}
	if err := a.RenewLease(ctxBG, "r", la, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("RenewLease of A's taken lease = %v, want ErrLeaseLost", err)
	}
	if err := a.ReleaseLease(ctxBG, "r", la); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireLease(ctxBG, "r", "A", time.Hour); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("A's stale release freed B's lease: AcquireLease = %v", err)
	}
	if err := b.Append(ctxBG, "r", 2, leased(step(2), lb)); err != nil {
		t.Fatalf("Append under B's lease: %v", err)
	}
	if ep, _ := eventEpochs(t, schema, "r"); fmt.Sprint(ep) != "[1 1 2 2]" {
		t.Fatalf("event epochs %v, want [1 1 2 2]", ep)
	}
	// Released, the lease is free at once, with the next epoch.
	if err := b.ReleaseLease(ctxBG, "r", lb); err != nil {
		t.Fatal(err)
	}
	la3, err := a.AcquireLease(ctxBG, "r", "A", time.Hour)
	if err != nil || la3.Epoch != 3 {
		t.Fatalf("AcquireLease after release = %v, %v; want epoch 3", la3, err)
	}
	// A run created under a lease taken since is not created.
	ln, err := a.AcquireLease(ctxBG, "n", "A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expire(t, a, "n", ln)
	if _, err := b.AcquireLease(ctxBG, "n", "B", time.Hour); err != nil {
		t.Fatal(err)
	}
	err = a.CreateRun(ctxBG, store.Run{ID: "n", Status: store.StatusRunning, CreatedAt: time.Unix(1, 0)}, leased(store.Batch{}, ln))
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("CreateRun under a taken lease = %v, want ErrLeaseLost", err)
	}
	if _, err := a.Run(ctxBG, "n"); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("Run after a refused CreateRun = %v", err)
	}
}

// Two hosts race for one run. In each round the lease moves from one to
// the other, and both then append at the same position at once: the old
// holder never commits. Then both run free with leases that expire
// almost at once, taking the run from each other: the log's epochs never
// go down, and each epoch's events are one host's.
func TestLeaseRaceNeverInterleaves(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openSchema(t, schema, Options{}), openSchema(t, schema, Options{})}
	names := []string{"A", "B"}
	mustCreate(t, stores[0], "r")
	var last uint64
	held, err := stores[0].AcquireLease(ctxBG, "r", "A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	for round := range rounds {
		old, next := round%2, (round+1)%2
		expire(t, stores[old], "r", held)
		taken, err := stores[next].AcquireLease(ctxBG, "r", names[next], time.Hour)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		leases := []store.Lease{held, taken}
		who := []int{old, next}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bt := step(last)
				for j := range bt.Events {
					bt.Events[j].Data = []byte(fmt.Sprintf(`{"by":%q}`, names[who[i]]))
				}
				<-start
				errs[i] = stores[who[i]].Append(ctxBG, "r", last, leased(bt, leases[i]))
			}()
		}
		close(start)
		wg.Wait()
		if !errors.Is(errs[0], store.ErrLeaseLost) && !errors.Is(errs[0], store.ErrSeqConflict) {
			t.Fatalf("round %d: the old holder's Append = %v, want it refused", round, errs[0])
		}
		if errs[1] != nil {
			t.Fatalf("round %d: the new holder's Append = %v", round, errs[1])
		}
		last += 2
		held = taken
	}
	ep, by := eventEpochs(t, schema, "r")
	for i := range ep {
		if want := int64(i/2 + 2); ep[i] != want || by[i] != names[(i/2+1)%2] {
			t.Fatalf("event %d: epoch %d by %s, want epoch %d by %s", i+1, ep[i], by[i], want, names[(i/2+1)%2])
		}
	}
	expire(t, stores[0], "r", held)

	// Free-running: each host takes the lease whenever it is free and
	// appends under it until refused.
	ctx, cancel := context.WithTimeout(ctxBG, 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	commits := 0
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				if commits >= 200 {
					mu.Unlock()
					return
				}
				mu.Unlock()
				l, err := s.AcquireLease(ctx, "r", names[i], time.Millisecond)
				if errors.Is(err, store.ErrLeaseHeld) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				for ctx.Err() == nil {
					rec, err := s.Run(ctx, "r")
					if err != nil {
						t.Error(err)
						return
					}
					bt := step(rec.LastSeq)
					for j := range bt.Events {
						bt.Events[j].Data = []byte(fmt.Sprintf(`{"by":%q}`, names[i]))
					}
					err = s.Append(ctx, "r", rec.LastSeq, leased(bt, l))
					if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrSeqConflict) {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					commits++
					enough := commits >= 200
					mu.Unlock()
					if enough {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if commits < 200 {
		t.Fatalf("the free-running writers made %d commits before the time was up, want 200", commits)
	}
	ep, by = eventEpochs(t, schema, "r")
	owner := map[int64]string{}
	for i := 1; i < len(ep); i++ {
		if ep[i] < ep[i-1] {
			t.Fatalf("event %d has epoch %d after epoch %d", i+1, ep[i], ep[i-1])
		}
	}
	epochs := 0
	for i := range ep {
		if w, ok := owner[ep[i]]; ok && w != by[i] {
			t.Fatalf("epoch %d has events of %s and %s", ep[i], w, by[i])
		} else if !ok {
			epochs++
		}
		owner[ep[i]] = by[i]
	}
	t.Logf("%d commits, %d epochs", commits, epochs)
}

// Two hosts claiming at once take every run that needs a host (left
// running, or with a timer due) once between them, and nothing else: not
// a waiting run with no timer due, not a run whose lease is live. A run
// whose lease expires is claimed again, under the next epoch.
func TestClaimRunsSkipLocked(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openSchema(t, schema, Options{}), openSchema(t, schema, Options{})}
	s := stores[0]
	want := map[string]bool{}
	for i := range 40 {
		id := fmt.Sprintf("run%02d", i)
		rec := store.Run{ID: id, Status: store.StatusRunning, CreatedAt: time.Unix(1, 0), LastSeq: 0}
		var b store.Batch
		switch i % 4 {
		case 0, 1: // left running: needs a host
			want[id] = true
		case 2: // a timer due
			rec.Status = store.StatusWaiting
			b.PutTimers = []store.Timer{{RunID: id, ID: "t", FireAt: time.Now().Add(-time.Second)}}
			want[id] = true
		case 3: // a timer not due
			rec.Status = store.StatusWaiting
			b.PutTimers = []store.Timer{{RunID: id, ID: "t", FireAt: time.Now().Add(time.Hour)}}
		}
		b.Run = &rec
		if err := s.CreateRun(ctxBG, rec, b); err != nil {
			t.Fatal(err)
		}
	}
	// One running run a host is driving.
	if _, err := s.AcquireLease(ctxBG, "run00", "busy", time.Hour); err != nil {
		t.Fatal(err)
	}
	delete(want, "run00")
	got := make([][]store.Claim, 2)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				cs, err := stores[i].ClaimRuns(ctxBG, names2[i], time.Hour, 4)
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = append(got[i], cs...)
			}
		}()
	}
	wg.Wait()
	rest, err := s.ClaimRuns(ctxBG, "late", time.Hour, 100)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]int{}
	for _, cs := range append(got, rest) {
		for _, c := range cs {
			claimed[c.RunID]++
		}
	}
	for id, n := range claimed {
		if n != 1 || !want[id] {
			t.Errorf("run %s claimed %d times (needs a host: %v)", id, n, want[id])
		}
	}
	if len(claimed) != len(want) {
		t.Errorf("%d runs claimed, %d need a host", len(claimed), len(want))
	}
	if again, err := s.ClaimRuns(ctxBG, "again", time.Hour, 100); err != nil || len(again) != 0 {
		t.Fatalf("a second claim = %v, %v; want none", again, err)
	}
	// run01's host dies: once its lease expires, it is claimed again.
	var l store.Lease
	for _, cs := range append(got, rest) {
		for _, c := range cs {
			if c.RunID == "run01" {
				l = c.Lease
			}
		}
	}
	expire(t, s, "run01", l)
	again, err := stores[1].ClaimRuns(ctxBG, "B", time.Hour, 100)
	if err != nil || len(again) != 1 || again[0].RunID != "run01" || again[0].Lease.Epoch != l.Epoch+1 {
		t.Fatalf("claim after expiry = %v, %v; want run01 at epoch %d", again, err, l.Epoch+1)
	}
}

var names2 = []string{"A", "B"}

// A host listening hears of a run created, and of a lease released, on
// another.
func TestListenHearsOtherHosts(t *testing.T) {
	schema := newSchema(t)
	a, b := openSchema(t, schema, Options{}), openSchema(t, schema, Options{})
	heard := make(chan string, 16)
	ctx, cancel := context.WithCancel(ctxBG)
	defer cancel()
	listening := make(chan error, 1)
	go func() { listening <- b.Listen(ctx, func(id string) { heard <- id }) }()
	// LISTEN takes effect once its connection is up: retry the first
	// notice until one arrives.
	var l store.Lease
	deadline := time.After(10 * time.Second)
	mustCreate(t, a, "r")
	for got := false; !got; {
		var err error
		if l, err = a.AcquireLease(ctxBG, "r", "A", time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := a.ReleaseLease(ctxBG, "r", l); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-heard:
			if id != "r" {
				t.Fatalf("heard %q, want r", id)
			}
			got = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notice of a released lease")
		}
	}
	mustCreate(t, a, "r2")
	for r2 := false; !r2; {
		select {
		case id := <-heard:
			r2 = id == "r2"
		case <-deadline:
			t.Fatal("no notice of a created run")
		}
	}
	cancel()
	if err := <-listening; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen returned %v", err)
	}
}

// RenewLeases renews a host's leases together and names those another
// host has taken.
func TestRenewLeasesNamesTheLost(t *testing.T) {
	schema := newSchema(t)
	s := openSchema(t, schema, Options{})
	var held []store.Claim
	for _, id := range []string{"a", "b", "c"} {
		l, err := s.AcquireLease(ctxBG, id, "A", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, store.Claim{RunID: id, Lease: l})
	}
	expire(t, s, "b", held[1].Lease)
	if _, err := s.AcquireLease(ctxBG, "b", "B", time.Hour); err != nil {
		t.Fatal(err)
	}
	expire(t, s, "c", held[2].Lease) // expired, not taken: renewed
	lost, err := s.RenewLeases(ctxBG, "A", held, time.Hour)
	if err != nil || fmt.Sprint(lost) != "[b]" {
		t.Fatalf("RenewLeases = %v, %v; want [b]", lost, err)
	}
	if _, err := s.AcquireLease(ctxBG, "c", "B", time.Hour); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("c was not renewed: AcquireLease = %v", err)
	}
}
