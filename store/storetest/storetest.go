// Package storetest is the conformance suite of store.Store: tests of
// every call's contract, and a simulation that applies random operations
// to a store and to an in-memory model of the contract and compares every
// result and every error. A backend passes it to claim it is a Store; the
// embedded bbolt store and the PostgreSQL store run the same suite.
//
//	func TestConformance(t *testing.T) { storetest.Run(t, openMine) }
//
// Crash checks a store's durability across a killed process.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// Opener opens the store of test t. Its first call for a t returns an
// empty store; a later call for the same t, after the suite closed the
// store it had, returns a store on the same data again (a reopen). It
// closes what it opened in t.Cleanup (Close twice must be harmless), and
// fails t when it cannot open.
type Opener func(t *testing.T) store.Store

// Run runs the conformance suite and the simulation against the stores
// open gives, each case in a parallel subtest of its own.
func Run(t *testing.T, open Opener) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, open)
		})
	}
	t.Run("Simulation", func(t *testing.T) { Simulation(t, open) })
}

type testCase struct {
	name string
	fn   func(t *testing.T, open Opener)
}

// harness holds the store of one test and reopens it.
type harness struct {
	t    *testing.T
	open Opener
	S    store.Store
}

func begin(t *testing.T, open Opener) *harness {
	t.Helper()
	return &harness{t: t, open: open, S: open(t)}
}

// reopen closes the store and opens its data again.
func (h *harness) reopen() {
	h.t.Helper()
	if err := h.S.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.S = h.open(h.t)
}

// wantErr fails the test unless got matches want: nil for nil, errors.Is
// otherwise.
func wantErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s: unexpected error %v", what, got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Fatalf("%s: got error %v, want %v", what, got, want)
	}
}

// sameTime reports whether got is the instant want and is in UTC, as every
// time read back from the store must be.
func sameTime(got, want time.Time) bool {
	return got.Equal(want) && got.Location() == time.UTC
}

func timeDiff(field string, got, want time.Time) string {
	if sameTime(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %s (%v), want %s", field, got.Format(time.RFC3339Nano), got.Location(), want.Format(time.RFC3339Nano))
}

func rawDiff(field string, got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %q, want %q", field, trunc(got), trunc(want))
}

func trunc(b []byte) []byte {
	if len(b) > 80 {
		return append(append([]byte(nil), b[:80]...), "..."...)
	}
	return b
}

func join(diffs ...string) string {
	var out []string
	for _, d := range diffs {
		if d != "" {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func scalarDiff(field string, got, want any) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %v, want %v", field, got, want)
}

func diffRun(got, want store.Run) string {
	return join(
		scalarDiff("ID", got.ID, want.ID),
		scalarDiff("Tool", got.Tool, want.Tool),
		scalarDiff("store.Plugin", got.Plugin, want.Plugin),
		scalarDiff("Version", got.Version, want.Version),
		scalarDiff("ModuleHash", got.ModuleHash, want.ModuleHash),
		scalarDiff("Status", got.Status, want.Status),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
		timeDiff("UpdatedAt", got.UpdatedAt, want.UpdatedAt),
		scalarDiff("LastSeq", got.LastSeq, want.LastSeq),
		rawDiff("Detail", got.Detail, want.Detail),
	)
}

func diffEvent(got, want store.Event) string {
	return join(
		scalarDiff("Seq", got.Seq, want.Seq),
		timeDiff("Time", got.Time, want.Time),
		scalarDiff("Kind", got.Kind, want.Kind),
		rawDiff("Data", got.Data, want.Data),
	)
}

func diffTimer(got, want store.Timer) string {
	return join(
		scalarDiff("RunID", got.RunID, want.RunID),
		scalarDiff("ID", got.ID, want.ID),
		timeDiff("FireAt", got.FireAt, want.FireAt),
		scalarDiff("Kind", got.Kind, want.Kind),
		scalarDiff("Position", got.Position, want.Position),
	)
}

func diffAsk(got, want store.Ask) string {
	return join(
		scalarDiff("ID", got.ID, want.ID),
		scalarDiff("RunID", got.RunID, want.RunID),
		scalarDiff("Tool", got.Tool, want.Tool),
		scalarDiff("Position", got.Position, want.Position),
		scalarDiff("Open", got.Open, want.Open),
		rawDiff("Request", got.Request, want.Request),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
	)
}

func diffHook(got, want store.Hook) string {
	return scalarDiff("store.Hook", got, want)
}

func diffPlugin(got, want store.Plugin) string {
	return join(
		scalarDiff("Name", got.Name, want.Name),
		scalarDiff("Version", got.Version, want.Version),
		scalarDiff("ModuleHash", got.ModuleHash, want.ModuleHash),
		rawDiff("Manifest", got.Manifest, want.Manifest),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
		scalarDiff("Size", got.Size, want.Size),
	)
}

// diffList compares two slices element by element with diff.
func diffList[T any](got, want []T, diff func(got, want T) string) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d items, want %d", len(got), len(want))
	}
	for i := range got {
		if d := diff(got[i], want[i]); d != "" {
			return fmt.Sprintf("item %d: %s", i, d)
		}
	}
	return ""
}
