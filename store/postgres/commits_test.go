package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// With Options.CommitNotices, a host following a run on another store
// hears of each Append that committed, once per transaction, and not of
// one that was refused.
func TestListenCommitsHearsEachAppend(t *testing.T) {
	schema := newSchema(t)
	a, b := openSchema(t, schema, Options{CommitNotices: true}), openSchema(t, schema, Options{})
	heard := make(chan string, 64)
	ctx, cancel := context.WithCancel(ctxBG)
	defer cancel()
	listening := make(chan error, 1)
	go func() { listening <- b.ListenCommits(ctx, func(id string) { heard <- id }) }()
	mustCreate(t, a, "r")
	mustCreate(t, a, "other")
	// LISTEN takes effect once its connection is up: append to "other"
	// until its first notice arrives.
	var last uint64
	deadline := time.After(10 * time.Second)
	for got := false; !got; last += 2 {
		if err := a.Append(ctxBG, "other", last, step(last)); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-heard:
			if id != "other" {
				t.Fatalf("heard %q, want other", id)
			}
			got = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notice of a committed append")
		}
	}
	// Drain the notices of the appends sent before LISTEN took effect.
	if err := a.Append(ctxBG, "r", 0, step(0)); err != nil {
		t.Fatal(err)
	}
	for id := <-heard; id != "r"; id = <-heard {
	}
	const n = 20
	for i := range n {
		seq := uint64(2 + 2*i)
		if err := a.Append(ctxBG, "r", seq, step(seq)); err != nil {
			t.Fatal(err)
		}
		if err := a.Append(ctxBG, "r", 0, step(0)); !errors.Is(err, store.ErrSeqConflict) {
			t.Fatalf("stale Append = %v, want ErrSeqConflict", err)
		}
	}
	// A marker after the appends: every notice before it is one of them.
	if err := a.Append(ctxBG, "other", last, step(last)); err != nil {
		t.Fatal(err)
	}
	got := 0
	for id := <-heard; id != "other"; id = <-heard {
		if id != "r" {
			t.Fatalf("heard %q, want r", id)
		}
		got++
	}
	if got != n {
		t.Fatalf("heard %d notices of run r, want one per committed Append, %d", got, n)
	}
	cancel()
	if err := <-listening; !errors.Is(err, context.Canceled) {
		t.Fatalf("ListenCommits returned %v", err)
	}
}
