package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The helpers of the tests of a killed writer (the journal's and group
// commit's): the batches a writer appends, the start of a child process
// and the check of what a store holds after the kill. The crash test every
// Store passes runs against this store in storetest_test.go.

const crashRun = "crash-run"

var crashBase = time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)

// crashBatch is batch n (from 1) of the child: two events, a timer that
// replaces the previous batch's, and a question that stays open until the
// next batch settles it.
func crashBatch(n uint64) Batch {
	seq := 2*n - 1
	data := fmt.Sprintf(`{"batch":%d,"pad":%q}`, n, strings.Repeat("p", int(n%7)*300))
	b := Batch{
		Events: []Event{
			{Seq: seq, Time: crashBase.Add(time.Duration(n)), Kind: "step", Data: []byte(data)},
			{Seq: seq + 1, Time: crashBase.Add(time.Duration(n) + time.Millisecond), Kind: "checkpoint", Data: []byte(strconv.FormatUint(n, 10))},
		},
		PutTimers: []Timer{crashTimer(n)},
		PutAsks:   []Ask{crashAsk(n, true)},
	}
	if n > 1 {
		b.DeleteTimers = []Timer{crashTimer(n - 1)}
		b.PutAsks = append(b.PutAsks, crashAsk(n-1, false))
	}
	return b
}

func crashTimer(n uint64) Timer {
	return Timer{RunID: crashRun, ID: fmt.Sprintf("t%d", n), FireAt: crashBase.Add(time.Duration(n) * time.Second), Kind: "sleep"}
}

func crashAsk(n uint64, open bool) Ask {
	return Ask{ID: fmt.Sprintf("q%d", n), RunID: crashRun, Open: open, Request: []byte(`{}`), CreatedAt: crashBase.Add(time.Duration(n))}
}

// startChild starts this test binary again to run only the test named,
// with env set to path, and returns it and its stdout.
func startChild(t *testing.T, test, env, path string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
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
func checkCrashLog(t *testing.T, path string, committed uint64) {
	t.Helper()
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	r, err := s.Run(ctx, crashRun)
	if err != nil {
		t.Fatalf("Run after crash: %v", err)
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
	var want []Event
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
	if d := diffList(timers, []Timer{crashTimer(have)}, diffTimer); d != "" {
		t.Errorf("timers after crash (log at batch %d): %s", have, d)
	}
	open, err := s.Asks(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(open, []Ask{crashAsk(have, true)}, diffAsk); d != "" {
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
