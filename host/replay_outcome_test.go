package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/host"
)

// goldenWith reads a golden history and lets edit change its decoded
// events before it is read back as a History.
func goldenWith(t *testing.T, file string, edit func(events []any)) *host.History {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "histories", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(doc["events"].([]any))
	}
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return hist
}

// lastEvent returns the history's last event, decoded.
func lastEvent(events []any) map[string]any { return events[len(events)-1].(map[string]any) }

// A replay that makes every recorded op but ends the run otherwise than the
// history does is not reported as the same end: its Outcome says it
// differs and how, and Strict makes that an error. (Issue 27: the replay
// command printed "consistent: the guest completed as recorded" whatever
// result the guest completed with.)
func TestReplayComparesTheResult(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	deploy := guest(t, "examples/deploy")

	cases := []struct {
		name    string
		edit    func(events []any)
		outcome string
	}{
		{"as recorded", nil, host.OutcomeSame},
		{"keys in another order", func(ev []any) {
			// The same value written otherwise is the same result.
			d := lastEvent(ev)["data"].(map[string]any)
			d["result"] = json.RawMessage(`{"url":"https://api.deploys.invalid/releases/run_5lx7z7bhwlsrwrq3-3","deployed":true}`)
		}, host.OutcomeSame},
		{"another result", func(ev []any) {
			d := lastEvent(ev)["data"].(map[string]any)
			d["result"] = map[string]any{"deployed": false}
		}, host.OutcomeDiffers},
		{"a failure recorded", func(ev []any) {
			e := lastEvent(ev)
			e["kind"] = host.EvRunFailed
			e["data"] = map[string]any{"op": 4, "error": map[string]any{"type": "FatalError", "message": "no"}}
		}, host.OutcomeDiffers},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := f.h.CheckReplay(ctx, goldenWith(t, "deploy-approved.json", c.edit), deploy)
			if err != nil {
				t.Fatalf("the ops replay, so the check must not fail: %v", err)
			}
			if rep.End != "completed" || rep.Ops != rep.RecordedOps || rep.Outcome != c.outcome {
				t.Fatalf("report %+v, want outcome %s", rep, c.outcome)
			}
			serr := rep.Strict()
			if c.outcome == host.OutcomeSame {
				if serr != nil || rep.OutcomeDetail != "" {
					t.Fatalf("a same result is not an error: %v %q", serr, rep.OutcomeDetail)
				}
				return
			}
			var rd *host.ResultDiffersError
			if !errors.As(serr, &rd) || !errors.Is(serr, host.ErrResultDiffers) || !errors.Is(serr, host.ErrNonDeterminism) {
				t.Fatalf("Strict on a differing result: %v", serr)
			}
			if rd.RunID != rep.RunID || rd.Detail == "" || rd.Detail != rep.OutcomeDetail {
				t.Errorf("error %+v for report %+v", rd, rep)
			}
		})
	}
}

// A replay check reports how many of the recorded activations the guest
// got into, not only how many there are: all of them when it replays to
// the end, up to the one it diverged in when it does not. (Issue 27:
// "replayed 0 of 6 recorded ops over 5 activations" named the history's
// count.)
func TestReplayCountsTheActivationsItReached(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			rep, err := f.h.CheckReplay(ctx, goldenWith(t, g.file, nil), guest(t, g.guest))
			if rep == nil || rep.Activations == 0 {
				t.Fatalf("report %+v %v", rep, err)
			}
			var nd *host.NonDeterminismError
			switch {
			case !g.bad && (err != nil || rep.ActivationsReached != rep.Activations):
				t.Errorf("a good history: reached %d of %d activations (%v)", rep.ActivationsReached, rep.Activations, err)
			case g.bad && !errors.As(err, &nd):
				t.Fatalf("want a *NonDeterminismError, got %v", err)
			case g.bad && rep.ActivationsReached != nd.Actual.Activation+1:
				t.Errorf("diverged in activation %d, report says %d reached (%+v)", nd.Actual.Activation, rep.ActivationsReached, rep)
			}
		})
	}
	// One of the damaged histories parts before its last activation, so
	// the count is not merely the recorded one.
	rep, err := f.h.CheckReplay(ctx, goldenWith(t, "bad-step-renamed.json", nil), guest(t, "examples/deploy"))
	if !errors.Is(err, host.ErrNonDeterminism) || rep.ActivationsReached >= rep.Activations {
		t.Errorf("bad-step-renamed: %+v %v", rep, err)
	}
}
