package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// The crash child is this test binary run again with crashChildEnv set to
// the store's location. It appends batches and prints "committed N" after
// Append of batch N returns, until it is killed.
const crashChildEnv = "SANDFLOW_STORETEST_CRASH_CHILD"

const crashRun = "crash-run"

var crashBase = time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)

// crashBatch is batch n (from 1) of the child: two events, a timer that
// replaces the previous batch's, and a question that stays open until the
// next batch settles it.
func crashBatch(n uint64) store.Batch {
	seq := 2*n - 1
	data := fmt.Sprintf(`{"batch":%d,"pad":%q}`, n, strings.Repeat("p", int(n%7)*300))
	b := store.Batch{
		Events: []store.Event{
			{Seq: seq, Time: crashBase.Add(time.Duration(n)), Kind: "step", Data: []byte(data)},
			{Seq: seq + 1, Time: crashBase.Add(time.Duration(n) + time.Millisecond), Kind: "checkpoint", Data: []byte(strconv.FormatUint(n, 10))},
		},
		PutTimers: []store.Timer{crashTimer(n)},
		PutAsks:   []store.Ask{crashAsk(n, true)},
	}
	if n > 1 {
		b.DeleteTimers = []store.Timer{crashTimer(n - 1)}
		b.PutAsks = append(b.PutAsks, crashAsk(n-1, false))
	}
	return b
}

func crashTimer(n uint64) store.Timer {
	return store.Timer{RunID: crashRun, ID: fmt.Sprintf("t%d", n), FireAt: crashBase.Add(time.Duration(n) * time.Second), Kind: "sleep"}
}

func crashAsk(n uint64, open bool) store.Ask {
	return store.Ask{ID: fmt.Sprintf("q%d", n), RunID: crashRun, Open: open, Request: []byte(`{}`), CreatedAt: crashBase.Add(time.Duration(n))}
}

// crashChild runs in the child process and never returns normally.
func crashChild(path string, open func(loc string) (store.Store, error)) {
	fail := func(err error) {
		fmt.Fprintf(os.Stdout, "error %v\n", err)
		os.Exit(3)
	}
	s, err := open(path)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	r, err := s.Run(ctx, crashRun)
	if errors.Is(err, store.ErrRunNotFound) {
		err = s.CreateRun(ctx, store.Run{ID: crashRun, Tool: "crash", Status: store.StatusRunning, CreatedAt: crashBase}, store.Batch{})
	}
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stdout, "ready %d\n", r.LastSeq)
	for n := r.LastSeq/2 + 1; n < r.LastSeq/2+100000; n++ {
		if err := s.Append(ctx, crashRun, 2*(n-1), crashBatch(n)); err != nil {
			fail(err)
		}
		// Written straight to the pipe (os.Stdout is unbuffered): once the
		// parent reads this line, batch n has been committed.
		fmt.Fprintf(os.Stdout, "committed %d\n", n)
	}
	fail(errors.New("child was not killed"))
}

// Crash kills a child process that appends batches to a store, three
// times at random points, and checks after each kill that every batch an
// Append acknowledged is in the store, whole, with the indexes of the
// log's last batch and nothing of a batch half written. newLoc names a
// new store (a file, a database schema) and open opens the store at a
// location, in the parent and in the child; the stores it opens must sync
// every commit.
//
// The child is this test binary run again, running only the test that
// called Crash: there Crash does the child's part and exits, so the test
// must call it before anything it would not want to do twice.
func Crash(t *testing.T, newLoc func(t *testing.T) string, open func(loc string) (store.Store, error)) {
	CrashChecked(t, newLoc, open, nil)
}

// CrashChecked is Crash that also calls check, if not nil, on the store's
// location after each kill, before the store is opened again: a backend's
// own check of what it left behind (the embedded store verifies its file).
func CrashChecked(t *testing.T, newLoc func(t *testing.T) string, open func(loc string) (store.Store, error), check func(t *testing.T, loc string)) {
	if loc := os.Getenv(crashChildEnv); loc != "" {
		crashChild(loc, open)
		return
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	path := newLoc(t)
	var committed uint64 // highest batch any child reported
	for round := 1; round <= 3; round++ {
		killAfter := 5 + rng.IntN(60) // reported commits before the kill
		reported := runCrashChild(t, path, killAfter, time.Duration(rng.IntN(3000))*time.Microsecond)
		if reported < committed {
			t.Fatalf("round %d: child reported batch %d, earlier rounds already had %d", round, reported, committed)
		}
		committed = reported
		t.Logf("round %d: killed after %d reported commits, last reported batch %d", round, killAfter, committed)
		if check != nil {
			check(t, path)
		}
		checkCrashLog(t, path, committed, open)
	}
}

// runCrashChild starts a child on path, waits until it has reported
// killAfter commits, waits delay more, SIGKILLs it, and returns the highest
// batch it reported.
func runCrashChild(t *testing.T, path string, killAfter int, delay time.Duration) uint64 {
	t.Helper()
	cmd, out := startChild(t, crashChildEnv, path)
	var once sync.Once
	kill := func() {
		once.Do(func() {
			if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) { // SIGKILL
				t.Errorf("kill child: %v", err)
			}
		})
	}
	// Never leave the child behind, and never wait for it forever.
	deadline := time.AfterFunc(8*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()

	var last uint64
	seen := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "committed "):
			n, err := strconv.ParseUint(strings.TrimPrefix(line, "committed "), 10, 64)
			if err != nil {
				kill()
				t.Fatalf("child said %q", line)
			}
			if n != last+1 && last != 0 {
				kill()
				t.Fatalf("child reported batch %d after %d", n, last)
			}
			last = n
			seen++
			if seen == killAfter {
				// Let it run on a little, so the kill lands at an arbitrary
				// point of an Append, not right after a print.
				time.AfterFunc(delay, kill)
			}
		case strings.HasPrefix(line, "error "):
			kill()
			t.Fatalf("child failed: %s", line)
		}
		// Lines after the kill were written before it: they count.
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("child ended with %v, want death by SIGKILL", err)
	}
	if seen < killAfter {
		t.Fatalf("child reported only %d commits before dying (deadline?)", seen)
	}
	return last
}

// startChild starts this test binary again to run only test t, with env
// set to path, and returns it and its stdout.
func startChild(t *testing.T, env, path string) (*exec.Cmd, io.Reader) {
	t.Helper()
	run := "^" + strings.Join(strings.Split(t.Name(), "/"), "$/^") + "$"
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// checkCrashLog checks that every batch up to committed is in the file,
// intact, and that the indexes match the log's last batch exactly.
func checkCrashLog(t *testing.T, path string, committed uint64, open func(loc string) (store.Store, error)) {
	t.Helper()
	s, err := open(path)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	r, err := s.Run(ctx, crashRun)
	if err != nil {
		t.Fatalf("store.Run after crash: %v", err)
	}
	if r.LastSeq%2 != 0 {
		t.Fatalf("LastSeq %d is in the middle of a batch", r.LastSeq)
	}
	have := r.LastSeq / 2
	// The child may have committed one batch it did not get to report.
	if have < committed || have > committed+1 {
		t.Fatalf("log holds %d batches, child reported %d committed", have, committed)
	}
	evs, err := s.Events(ctx, crashRun, 0, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	var want []store.Event
	for n := uint64(1); n <= have; n++ {
		want = append(want, crashBatch(n).Events...)
	}
	if d := diffList(evs, want, diffEvent); d != "" {
		t.Fatalf("events after crash: %s", d)
	}
	timers, err := s.DueTimers(ctx, crashBase.Add(1000*time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(timers, []store.Timer{crashTimer(have)}, diffTimer); d != "" {
		t.Errorf("timers after crash (log at batch %d): %s", have, d)
	}
	openAsks, err := s.Asks(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(openAsks, []store.Ask{crashAsk(have, true)}, diffAsk); d != "" {
		t.Errorf("open questions after crash (log at batch %d): %s", have, d)
	}
	all, err := s.Asks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(all)) != have {
		t.Errorf("%d questions after %d batches", len(all), have)
	}
}
