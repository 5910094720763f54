package jsprogram_test

import (
	"testing"

	"github.com/sandflow/sandflow/jsprogram"
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
	t.Logf("%v", got)
}

func TestSyntaxError(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	e := failure(t, f.run("const a = 1;\nconst b = ;\nreturn a;"))
	if e.Code != jsprogram.CodeSyntaxError || e.Line != 2 {
		t.Fatalf("error = %+v", e)
	}
	t.Logf("%+v", e)
}
