package jsprogram_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// parkCases are programs whose resumes a parked program and a replayed one
// must see alike: the clock, Math.random, the order promises settle in,
// races, failures caught, console output. pure: the result does not depend
// on the run's seed or time, so two runs return the same bytes.
var parkCases = []struct {
	name string
	pure bool
	js   string
}{
	{"date-and-random", false, `
const a = [Math.random(), Date.now(), new Date().toISOString()];
const r1 = await ctx.agent("echo", { message: JSON.stringify(a) });
const b = [Math.random(), Date.now()];
const r2 = await ctx.agent("echo", { message: JSON.stringify(b) });
return { a, b, r1, r2, c: [Math.random(), Date.now(), new Date().getTimezoneOffset()] };`},
	{"settlement-order", true, `
const log = [];
const ps = [1, 2, 3].map(i => ctx.agent("echo", { message: "m" + i }).then(r => { log.push(r); return r; }));
Promise.resolve().then(() => log.push("micro"));
const all = await Promise.all(ps);
log.push("all");
const s = await ctx.agent("echo", { message: log.join(",") });
return { log, all, s };`},
	{"race-then-all", true, `
const p1 = ctx.agent("ticket-triage", { message: "a" }), p2 = ctx.agent("ticket-review", { message: "b" });
const first = await Promise.race([p1, p2]);
const both = await Promise.all([p1, p2]);
const next = await ctx.agent("echo", { message: first });
return { first, both, next };`},
	{"failure-caught", true, `
let caught = "";
try { await ctx.agent("no-such-agent", { message: "x" }); } catch (e) { caught = e.code + "|" + (e instanceof Error); }
const any = await Promise.any([ctx.agent("no-such-agent", { message: "y" }), ctx.agent("echo", { message: "z" })]).catch(e => "none:" + e.name);
console.log("between", caught);
const after = await ctx.agent("echo", { message: caught });
return { caught, any, after };`},
	{"sequential-ten", true, `
let acc = "";
for (let i = 0; i < 10; i++) {
  console.log("call", i, acc.length);
  if (i % 3 == 0) console.error("third", i);
  acc = await ctx.agent("echo", { message: acc.length + ":" + i });
}
return acc;`},
}

// The same programs resumed three ways: parked (the default), by a replay
// answered from the log in the worker (parking off), and by a replay of
// round trips (parking and the log off). Each run's history replays on the
// other two hosts to the same end with the same result, and a pure
// program's results are the same bytes.
func TestParkedAndReplayedResumesAgree(t *testing.T) {
	hosts := []struct {
		name string
		f    *fixture
	}{
		{"parked", openFixture(t, jsprogram.Options{}, nil, jsprogram.WorkflowTool{})},
		{"log-replay", openFixture(t, jsprogram.Options{MaxParked: -1}, nil, jsprogram.WorkflowTool{})},
		{"round-trip-replay", openFixture(t, jsprogram.Options{MaxParked: -1, RoundTripReplay: true}, nil, jsprogram.WorkflowTool{})},
	}
	for _, c := range parkCases {
		t.Run(c.name, func(t *testing.T) {
			runs := make([]host.RunInfo, len(hosts))
			for k, h := range hosts {
				before := h.f.JS.Stats()
				runs[k] = h.f.run(c.js)
				after := h.f.JS.Stats()
				if runs[k].Status != store.StatusCompleted {
					t.Fatalf("%s: run %s: %+v", h.name, runs[k].Status, runs[k].Error)
				}
				parked, lost := after.ParkedResumes-before.ParkedResumes, after.ParkedLost-before.ParkedLost
				fromLog := after.LogReplayedOps - before.LogReplayedOps
				if ok := map[string]bool{"parked": parked > 0 && lost == 0 && fromLog == 0,
					"log-replay":        parked == 0 && fromLog > 0,
					"round-trip-replay": parked == 0 && fromLog == 0}[h.name]; !ok {
					t.Fatalf("%s: %d resumes parked, %d lost, %d ops answered from the log", h.name, parked, lost, fromLog)
				}
				if c.pure && !bytes.Equal(runs[k].Result, runs[0].Result) {
					t.Fatalf("results differ:\n%s %s\n%s %s", hosts[0].name, runs[0].Result, h.name, runs[k].Result)
				}
				out, first := outputOf(t, h.f, runs[k].ID), outputOf(t, hosts[0].f, runs[0].ID)
				if strings.Contains(c.js, "console.") && !strings.Contains(out, "stdout: ") {
					t.Fatalf("%s: the program logged, yet the run recorded %q", h.name, out)
				}
				if c.pure && out != first {
					t.Fatalf("recorded output differs:\n%s %q\n%s %q", hosts[0].name, first, h.name, out)
				}
			}
			for k, from := range hosts {
				for _, to := range hosts {
					if to.f != from.f {
						crossCheck(t, from.f, to.f, runs[k].ID)
					}
				}
			}
		})
	}
}

// outputOf is a run's recorded console output, each event as
// stream: data.
func outputOf(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	evs, err := f.H.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, e := range evs {
		if e.Kind != host.EvOutput {
			continue
		}
		var d struct{ Stream, Data string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%s: %s", d.Stream, d.Data)
	}
	return out.String()
}

// crossCheck replays a run of from's on to: it must end as recorded,
// every op replayed, with the same outcome.
func crossCheck(t *testing.T, from, to *fixture, runID string) {
	t.Helper()
	var buf bytes.Buffer
	if err := from.H.ExportHistory(context.Background(), runID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := to.H.CheckReplay(context.Background(), hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.End != "completed" || rep.Ops != rep.RecordedOps || rep.Outcome != host.OutcomeSame {
		t.Fatalf("replay of run %s: %+v", runID, rep)
	}
}

const twoCalls = `const a = await ctx.agent("echo", { message: %q });
const b = await ctx.agent("echo", { message: a });
return b;`

// startGated starts a program of two calls and drives it in the
// background until its first call's turn has started (its program then
// waits, parked); the returned channel gets the drive's end.
func startGated(t *testing.T, f *fixture, msg string) (string, chan host.RunInfo) {
	t.Helper()
	base, _ := f.agents.turns()
	id := f.start(fmt.Sprintf(twoCalls, msg))
	done := make(chan host.RunInfo, 1)
	go func() {
		ri, err := f.H.Drive(context.Background(), id)
		if err != nil {
			t.Error(err)
		}
		done <- ri
	}()
	testhost.WaitUntil(t, "the first call's turn", func() bool { n, _ := f.agents.turns(); return n > base })
	return id, done
}

func wantTwoCalls(t *testing.T, f *fixture, ri host.RunInfo, msg string) {
	t.Helper()
	if ri.Status != store.StatusCompleted {
		ri, _ = f.H.Drive(context.Background(), ri.ID)
	}
	want, _ := json.Marshal("echo: echo: " + msg)
	if got := result[json.RawMessage](t, ri); !bytes.Equal(got, want) {
		t.Fatalf("result %s, want %s", got, want)
	}
}

// With room for one parked program, a second run that parks evicts the
// first mid-run: the first's resume replays, the second's runs parked,
// and both end as they would have.
func TestParkedEvictedMidRun(t *testing.T) {
	a := newAgents(echo)
	a.gate = make(chan struct{})
	f := openFixture(t, jsprogram.Options{MaxParked: 1}, a, jsprogram.WorkflowTool{})
	_, doneA := startGated(t, f, "first")
	testhost.WaitUntil(t, "the first program to park", func() bool { return f.JS.Stats().Parked == 1 })
	first := jsprogram.ParkedPIDs(f.JS)[0]
	_, doneB := startGated(t, f, "second")
	testhost.WaitUntil(t, "the second program to park in the first's place", func() bool {
		pids := jsprogram.ParkedPIDs(f.JS)
		return len(pids) == 1 && pids[0] != first
	})
	close(a.gate)
	wantTwoCalls(t, f, <-doneA, "first")
	wantTwoCalls(t, f, <-doneB, "second")
	st := f.JS.Stats()
	if st.ParkedLost < 1 || st.ParkedResumes < 1 {
		t.Fatalf("%d resumes parked, %d lost; want at least one of each", st.ParkedResumes, st.ParkedLost)
	}
	if total, distinct := a.turns(); total != 4 || distinct != 4 {
		t.Fatalf("turns sent %d times over %d ids, want 4 over 4", total, distinct)
	}
}

// A parked program whose worker is killed: its resume finds it gone and
// replays, and the run ends as it would have, each turn sent once.
func TestParkedWorkerKilled(t *testing.T) {
	a := newAgents(echo)
	a.gate = make(chan struct{})
	f := openFixture(t, jsprogram.Options{}, a, jsprogram.WorkflowTool{})
	_, done := startGated(t, f, "killed")
	testhost.WaitUntil(t, "the program to park", func() bool { return f.JS.Stats().Parked == 1 })
	pids := jsprogram.ParkedPIDs(f.JS)
	if len(pids) != 1 {
		t.Fatalf("parked in %d workers", len(pids))
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(a.gate)
	wantTwoCalls(t, f, <-done, "killed")
	st := f.JS.Stats()
	if st.ParkedLost != 1 {
		t.Fatalf("%d resumes found their program gone, want 1", st.ParkedLost)
	}
	if total, distinct := a.turns(); total != 2 || distinct != 2 {
		t.Fatalf("turns sent %d times over %d ids, want 2 over 2", total, distinct)
	}
}

// A byte budget no worker fits: every program is evicted as it parks,
// and every resume replays.
func TestParkedOverByteBudget(t *testing.T) {
	f := openFixture(t, jsprogram.Options{MaxParkedBytes: 1}, nil, jsprogram.WorkflowTool{})
	ri := f.run(`let s = ""; for (let i = 0; i < 3; i++) s += await ctx.agent("echo", { message: "" + i }); return s;`)
	if got := result[string](t, ri); got != "echo: 0echo: 1echo: 2" {
		t.Fatalf("result %q", got)
	}
	if st := f.JS.Stats(); st.Parked != 0 || st.ParkedResumes != 0 || st.ParkedLost != 3 {
		t.Fatalf("stats %+v: want nothing parked and 3 resumes lost", st)
	}
}
