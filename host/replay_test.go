package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// A plugin whose op sequence changed while a run was suspended cannot take
// the run over; the run goes on on the version that started it.
func TestNonDeterministicUpgradeIsRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		f.add("examples/deploy")
		v2 := manifest(t, "examples/deploy") // same tool, next version
		if _, err := f.h.AddPlugin(ctx, guest(t, "host/testdata/guests/deploy-v2"), v2); err != nil {
			t.Fatal(err)
		}
		ri, err := f.h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), &host.CallOptions{Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		before, _ := f.h.Events(ctx, ri.ID)

		_, rep, err := f.h.Upgrade(ctx, ri.ID, 2)
		var nd *host.NonDeterminismError
		if !errors.As(err, &nd) || !errors.Is(err, host.ErrNonDeterminism) {
			t.Fatalf("want a *NonDeterminismError, got %v", err)
		}
		if nd.Position != 1 || nd.Expected.Kind != abi.OpStep || nd.Expected.Name != "planDeploy" || nd.Actual.Kind != abi.OpAsk {
			t.Errorf("divergence %+v", nd)
		}
		if !strings.Contains(err.Error(), `history has step "planDeploy", guest asked for ask`) {
			t.Errorf("message does not show expected and actual: %v", err)
		}
		if rep == nil || rep.Ops != 0 {
			t.Errorf("report %+v", rep)
		}
		after, _ := f.h.Events(ctx, ri.ID)
		if len(after) != len(before) {
			t.Errorf("the refused upgrade changed the log: %d events, was %d", len(after), len(before))
		}
		ri, err = f.h.Run(ctx, ri.ID)
		if err != nil || ri.Version != 1 || ri.Status != store.StatusWaiting {
			t.Fatalf("run after the refused upgrade: %+v %v", ri, err)
		}
		ri, err = f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: "approve"})
		if err != nil || ri.Status != store.StatusCompleted || ri.Version != 1 {
			t.Fatalf("the original version should finish the run: %+v %v", ri, err)
		}
	})
}

// An upgrade to a version that replays the history is taken.
func TestDeterministicUpgrade(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		f.add("examples/deploy")
		m := manifest(t, "examples/deploy")
		m.Description = "same module, new description"
		if _, err := f.h.AddPlugin(ctx, guest(t, "examples/deploy"), m); err != nil {
			t.Fatal(err)
		}
		ri, err := f.h.Call(ctx, "deploy", json.RawMessage(`{"service":"db"}`), &host.CallOptions{Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		ri, rep, err := f.h.Upgrade(ctx, ri.ID, 2)
		if err != nil || ri.Version != 2 || rep.End != "suspended" || rep.Ops != 2 {
			t.Fatalf("upgrade: %+v %+v %v", ri, rep, err)
		}
		evs, _ := f.h.Events(ctx, ri.ID)
		if evs[len(evs)-1].Kind != host.EvRunUpgraded {
			t.Errorf("upgrade not in the log: %s", evs[len(evs)-1].Kind)
		}
		f.restart()
		ri, err = f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: "cancel"})
		if err != nil || ri.Status != store.StatusCompleted || ri.Version != 2 {
			t.Fatalf("%+v %v", ri, err)
		}
	})
}

var update = flag.Bool("update", false, "rewrite the golden histories in testdata/histories")

// goldens lists the golden histories: the example that made each, and for
// bad-* ones, how the history was damaged.
var goldens = []struct {
	file, guest string
	bad         bool
}{
	{"deploy-approved.json", "examples/deploy", false},
	{"deploy-rejected.json", "examples/deploy", false},
	{"deploy-waiting.json", "examples/deploy", false},
	{"deploy-interrupted.json", "examples/deploy", false},
	{"remind.json", "examples/remind", false},
	{"approve-deadline-timeout.json", "examples/approve-deadline", false},
	{"bad-step-renamed.json", "examples/deploy", true},
	{"bad-op-kind.json", "examples/deploy", true},
	{"bad-extra-op.json", "examples/remind", true},
	{"bad-missing-op.json", "examples/approve-deadline", true},
}

// Golden histories replay against the examples built from source today;
// the damaged ones fail as non-deterministic.
func TestGoldenHistories(t *testing.T) {
	dir := filepath.Join("testdata", "histories")
	if *update {
		writeGoldens(t, dir)
	}
	f := newFixture(t, nil)
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, g.file))
			if err != nil {
				t.Fatal(err)
			}
			hist, err := host.ReadHistory(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := f.h.CheckReplay(context.Background(), hist, guest(t, g.guest))
			var nd *host.NonDeterminismError
			switch {
			case g.bad && !errors.As(err, &nd):
				t.Fatalf("want a *NonDeterminismError, got %v (%+v)", err, rep)
			case !g.bad && err != nil:
				t.Fatalf("replay failed: %v", err)
			case !g.bad && rep.Ops != rep.RecordedOps:
				t.Errorf("replayed %d of %d ops", rep.Ops, rep.RecordedOps)
			}
			if g.bad {
				t.Logf("%v", err)
			}
		})
	}
}

// writeGoldens runs the examples and writes their histories, then derives
// the bad ones by damaging copies as each name says.
func writeGoldens(t *testing.T, dir string) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, d := range []string{"examples/deploy", "examples/remind", "examples/approve-deadline"} {
		f.add(d)
	}
	export := func(id string) map[string]any {
		var buf bytes.Buffer
		if err := f.h.ExportHistory(ctx, id, &buf); err != nil {
			t.Fatal(err)
		}
		hist, err := host.ReadHistory(&buf)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		b, _ := json.Marshal(hist)
		json.Unmarshal(b, &m)
		return m
	}
	answer := func(ri host.RunInfo, opt string) host.RunInfo {
		ri, err := f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: opt})
		if err != nil {
			t.Fatal(err)
		}
		return ri
	}
	k := &kitchen{fixture: f}
	approved := answer(f.call("deploy", `{"service":"api"}`), "approve")
	rejected := answer(f.call("deploy", `{"service":"web"}`), "cancel")
	waiting := f.call("deploy", `{"service":"db"}`)
	remind := k.settle(f.call("remind", `{"note":"n","delay":"200ms"}`).ID, 10e9)
	deadline := f.call("approve-deadline", `{"service":"api","firstDeadline":"100ms","secondDeadline":"100ms"}`)
	deadline = k.settle(deadline.ID, 10e9)
	for _, ri := range []host.RunInfo{approved, rejected, remind, deadline} {
		if ri.Status != store.StatusCompleted {
			t.Fatalf("golden run %s is %s", ri.ID, ri.Status)
		}
	}
	histories := map[string]map[string]any{
		"deploy-approved.json":          export(approved.ID),
		"deploy-rejected.json":          export(rejected.ID),
		"deploy-waiting.json":           export(waiting.ID),
		"remind.json":                   export(remind.ID),
		"approve-deadline-timeout.json": export(deadline.ID),
	}
	events := func(h map[string]any) []any { return h["events"].([]any) }
	data := func(e any) map[string]any { return e.(map[string]any)["data"].(map[string]any) }
	clone := func(h map[string]any) map[string]any {
		b, _ := json.Marshal(h)
		var c map[string]any
		json.Unmarshal(b, &c)
		return c
	}
	histories["deploy-interrupted.json"] = interruptedDeploy(t, clone(histories["deploy-approved.json"]))
	// bad-step-renamed: the history says applyDeploy ran under another name.
	bad := clone(histories["deploy-approved.json"])
	for _, e := range events(bad) {
		if d := data(e); d["name"] == "applyDeploy" {
			d["name"] = "applyDeployV2"
		}
	}
	histories["bad-step-renamed.json"] = bad
	// bad-op-kind: at position 1 the history has a sleep where the guest
	// plans in a step.
	bad = clone(histories["deploy-waiting.json"])
	var out []any
	for _, e := range events(bad) {
		em, d := e.(map[string]any), data(e)
		switch {
		case em["kind"] == host.EvStepStarted && d["op"] == float64(1):
			em["kind"] = host.EvTimerSet
			em["data"] = map[string]any{"op": float64(1), "fireAt": "2100-01-01T00:00:00Z"}
		case d["op"] == float64(1) || d["step"] == float64(1):
			continue // the step's outcome and output
		}
		out = append(out, em)
	}
	for i, e := range out {
		e.(map[string]any)["seq"] = float64(i + 1)
	}
	bad["events"] = out
	bad["run"].(map[string]any)["lastSeq"] = float64(len(out))
	histories["bad-op-kind.json"] = bad
	// bad-extra-op: a progress op the guest never makes, before its sleep.
	bad = clone(histories["remind.json"])
	evs := events(bad)
	out = nil
	for _, e := range evs {
		em := e.(map[string]any)
		d := data(e)
		if op, ok := d["op"].(float64); ok && op >= 2 {
			d["op"] = op + 1
		}
		out = append(out, em)
		if em["kind"] == host.EvProgress {
			extra := clone(em)
			extra["data"].(map[string]any)["op"] = float64(2)
			extra["data"].(map[string]any)["value"] = "an op the guest never made"
			out = append(out, extra)
		}
	}
	for i, e := range out {
		e.(map[string]any)["seq"] = float64(i + 1)
	}
	bad["events"] = out
	bad["run"].(map[string]any)["lastSeq"] = float64(len(out))
	histories["bad-extra-op.json"] = bad
	// bad-missing-op: the escalation step is gone, and the ops after it move
	// up one position.
	bad = clone(histories["approve-deadline-timeout.json"])
	out = nil
	var dropped float64
	for _, e := range events(bad) {
		d := data(e)
		if d["name"] == "pageOnCall" || (dropped != 0 && d["op"] == dropped) {
			dropped = d["op"].(float64)
			continue
		}
		if op, ok := d["op"].(float64); ok && dropped != 0 && op > dropped {
			d["op"] = op - 1
		}
		out = append(out, e)
	}
	for i, e := range out {
		e.(map[string]any)["seq"] = float64(i + 1)
	}
	bad["events"] = out
	bad["run"].(map[string]any)["lastSeq"] = float64(len(out))
	histories["bad-missing-op.json"] = bad

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, h := range histories {
		b, err := json.MarshalIndent(h, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A ReplayChecker checks many histories against one module as CheckReplay
// does each: the good golden histories replay to their end, the damaged
// ones are caught with the same divergence. A module the engine refuses
// is refused when the checker is made. (TestReplayCheckerFindsItsModuleAgain
// checks a checker whose module the host let go of.)
func TestReplayChecker(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	dir := filepath.Join("testdata", "histories")
	checkers := map[string]*host.ReplayChecker{}
	check := func(t *testing.T) {
		for _, g := range goldens {
			raw, err := os.ReadFile(filepath.Join(dir, g.file))
			if err != nil {
				t.Fatal(err)
			}
			hist, err := host.ReadHistory(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			c := checkers[g.guest]
			if c == nil {
				if c, err = f.h.NewReplayChecker(ctx, guest(t, g.guest), ""); err != nil {
					t.Fatal(err)
				}
				checkers[g.guest] = c
			}
			rep, err := c.Check(ctx, hist)
			want, wantErr := f.h.CheckReplay(ctx, hist, guest(t, g.guest))
			var nd *host.NonDeterminismError
			switch {
			case g.bad && !errors.As(err, &nd):
				t.Fatalf("%s: want a *NonDeterminismError, got %v (%+v)", g.file, err, rep)
			case g.bad && (wantErr == nil || err.Error() != wantErr.Error()):
				t.Errorf("%s: checker says %v, CheckReplay %v", g.file, err, wantErr)
			case !g.bad && (err != nil || rep.Ops != rep.RecordedOps || rep.Ops == 0):
				t.Fatalf("%s: %+v %v", g.file, rep, err)
			case *rep != *want:
				t.Errorf("%s: checker reports %+v, CheckReplay %+v", g.file, rep, want)
			}
		}
	}
	check(t)

	_, err := f.h.NewReplayChecker(ctx, []byte("not a module"), "")
	var pe *host.PluginError
	if !errors.As(err, &pe) || pe.Reason != "not_wasm" || !errors.Is(err, host.ErrBadPlugin) {
		t.Fatalf("a checker of bytes that are no module: %v", err)
	}
	if _, err := f.h.NewReplayChecker(ctx, guest(t, "examples/remind"), "no-such-engine"); err == nil {
		t.Fatal("a checker on an engine the host lacks was made")
	}
}

// interruptedDeploy derives deploy-interrupted from deploy-approved: the
// apply step's first attempt is cut off by a crash, and recorded so by the
// host that recovered the run (the events the kernel writes for it, see
// TestStepCutOffByCrashIsRecordedOnRecovery); a second attempt after a
// one-second backoff completes. The events after the cut move a second on.
func interruptedDeploy(t testing.TB, h map[string]any) map[string]any {
	const apply = float64(3) // applyDeploy's op
	var out []any
	shift := time.Duration(0)
	for _, e := range h["events"].([]any) {
		em := e.(map[string]any)
		d := em["data"].(map[string]any)
		at, err := time.Parse(time.RFC3339Nano, em["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if shift == 0 && (d["step"] == apply || em["kind"] == host.EvStepCompleted && d["op"] == apply) {
			shift = time.Second
			ie := &host.StepInterruptedError{Step: "applyDeploy", Attempt: 1, Cause: abi.InterruptCrashed}
			retry := at.Add(shift).UTC().Format(time.RFC3339Nano)
			out = append(out,
				map[string]any{"kind": host.EvStepFailed, "time": at.UTC().Format(time.RFC3339Nano),
					"data": map[string]any{"op": apply, "attempt": float64(1), "error": ie.Object(), "retryAt": retry}},
				map[string]any{"kind": host.EvStepStarted, "time": retry,
					"data": map[string]any{"op": apply, "name": "applyDeploy", "attempt": float64(2)}})
		}
		if shift != 0 {
			em["time"] = at.Add(shift).UTC().Format(time.RFC3339Nano)
		}
		if text, ok := d["data"].(string); ok && d["step"] == apply {
			d["data"] = strings.Replace(text, "attempt 1)", "attempt 2)", 1)
		}
		if em["kind"] == host.EvStepCompleted && d["op"] == apply {
			d["attempt"] = float64(2)
		}
		out = append(out, em)
	}
	if shift == 0 {
		t.Fatal("deploy-approved has no apply step")
	}
	for i, e := range out {
		e.(map[string]any)["seq"] = float64(i + 1)
	}
	h["events"] = out
	run := h["run"].(map[string]any)
	run["lastSeq"] = float64(len(out))
	if u, err := time.Parse(time.RFC3339Nano, run["updatedAt"].(string)); err == nil {
		run["updatedAt"] = u.Add(shift).UTC().Format(time.RFC3339Nano)
	}
	// Round-trip: the values are plain JSON, as ReadHistory gives them.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
