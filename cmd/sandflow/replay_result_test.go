package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
)

// replay compares the result the guest completes with against the one the
// history records: a different one is a warning, exit 0, and with --strict
// a divergence, exit 4; the count says how many recorded activations the
// guest got into. (Issue 27: a changed result printed "consistent: the
// guest completed as recorded", and the count was the history's.)
func TestReplayWarnsWhenTheResultDiffers(t *testing.T) {
	c := newCLI(t)
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := guestbuild.Build(filepath.Join(root, "examples/deploy"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "host/testdata/histories/deploy-approved.json"))
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "good.json")
	if err := os.WriteFile(good, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	events := doc["events"].([]any)
	last := events[len(events)-1].(map[string]any)
	last["data"].(map[string]any)["result"] = map[string]any{"deployed": false}
	changed, _ := json.Marshal(doc)
	bad := filepath.Join(t.TempDir(), "changed.json")
	if err := os.WriteFile(bad, changed, 0o600); err != nil {
		t.Fatal(err)
	}

	out, errs, code := c.run("replay", "--history", good, "--plugin", wasm, "--strict")
	if code != 0 || !strings.Contains(out, "into 4 of 4 recorded activations") || !strings.Contains(out, "with the recorded result") || errs != "" {
		t.Errorf("the recorded history: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = c.run("replay", "--history", bad, "--plugin", wasm)
	if code != 0 || !strings.Contains(out, "result differs") || strings.Contains(out, "completed as recorded") || !strings.Contains(errs, "warning:") {
		t.Errorf("a changed result without --strict: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = c.run("replay", "--history", bad, "--plugin", wasm, "--strict")
	if code != exitNonDeterminism || !strings.Contains(errs, "differs") {
		t.Errorf("a changed result with --strict: exit %d, want %d\n%s%s", code, exitNonDeterminism, out, errs)
	}
	out, _, code = c.run("replay", "--history", bad, "--plugin", wasm, "--strict", "--json")
	var rep struct {
		host.ReplayReport
		Divergence string `json:"divergence"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if code != exitNonDeterminism || rep.Outcome != host.OutcomeDiffers || rep.OutcomeDetail == "" || rep.Divergence == "" || rep.ActivationsReached != rep.Activations {
		t.Errorf("--json --strict: exit %d, %+v", code, rep)
	}
}
