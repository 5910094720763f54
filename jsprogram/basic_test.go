package jsprogram_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func TestTrivialProgram(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	ri := f.run(`return { sum: 1 + 2 };`)
	got := result[map[string]int](t, ri)
	if got["sum"] != 3 {
		t.Fatalf("result = %v", got)
	}
}

func TestFanOut(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	ri := f.run(`
const tickets = [{id: 1}, {id: 2}];
const [triage, review] = await Promise.all([
  ctx.agent("ticket-triage", { message: JSON.stringify(tickets) }),
  ctx.agent("ticket-review", { message: JSON.stringify(tickets), outputSchema: {type: "object"} }),
]);
return { triage, review };`)
	got := result[map[string]any](t, ri)
	if got["triage"] != `ticket-triage: [{"id":1},{"id":2}]` {
		t.Fatalf("triage = %v", got["triage"])
	}
	// With outputSchema the call resolves to the structured value.
	review, _ := got["review"].(map[string]any)
	if review["agent"] != "ticket-review" || review["length"] != float64(19) {
		t.Fatalf("review = %v", got["review"])
	}
}

func TestSyntaxError(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	e := failure(t, f.run("const a = 1;\nconst b = ;\nreturn a;"))
	if e.Code != jsprogram.CodeSyntaxError || e.Line != 2 {
		t.Fatalf("error = %+v", e)
	}
	t.Logf("%+v", e)
}

// console writes go to the run's log, stdout or stderr, once: a resume
// replays the program, and output already recorded is not recorded again.
func TestConsoleGoesToTheRunLog(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	ri := f.run(`console.log("before", { a: 1 }); console.error("oops");
const r = await ctx.agent("echo", { message: "x" });
console.log("after", r);
return r;`)
	if ri.Status != store.StatusCompleted {
		t.Fatalf("run: %s %+v", ri.Status, ri.Error)
	}
	evs, err := f.H.Events(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	for _, e := range evs {
		if e.Kind != host.EvOutput {
			continue
		}
		var d struct{ Stream, Data string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stream == "stderr" {
			stderr.WriteString(d.Data)
		} else {
			stdout.WriteString(d.Data)
		}
	}
	if stdout.String() != "before {\"a\":1}\nafter echo: x\n" || stderr.String() != "oops\n" {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// The pool keeps at most MaxWorkers processes, replaces those that die,
// and stops them all on Close.
func TestPoolReplacesDeadWorkers(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{MemoryBytes: 64 << 20}, nil)
	for range 3 {
		e := failure(t, f.run(`const keep = []; for (;;) keep.push('x'.repeat(1 << 20) + keep.length);`))
		if e.Code != jsprogram.CodeMemory {
			t.Fatalf("code = %s: %v", e.Code, e)
		}
		if got := result[int](t, f.run(`return 7;`)); got != 7 {
			t.Fatalf("after a dead worker: %d", got)
		}
	}
	if st := f.JS.Stats(); st.Workers < 1 || st.Workers > 4 {
		t.Fatalf("stats after three deaths: %+v", st)
	}
	f.Close()
	if st := f.JS.Stats(); st.Workers != 0 {
		t.Fatalf("workers alive after Close: %+v", st)
	}
}
