package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// A tool's outputSchema is enforced: a body that completes with a result
// that does not match fails its run with an OutputSchemaError, whose event
// keeps the result, and a result that matches completes as before. The
// failed run's history replays, and a replay check finds the guest's
// result the recorded one. (Issue 27: the manifest's outputSchema was
// compiled and published to MCP clients but never checked.)
func TestOutputSchemaIsEnforced(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		m := manifest(t, "examples/deploy")
		// The approved path returns a url, the rejected one does not.
		m.OutputSchema = json.RawMessage(`{"type":"object","required":["deployed","url"]}`)
		wasm := guest(t, "examples/deploy")
		if _, err := f.h.AddPlugin(ctx, wasm, m); err != nil {
			t.Fatal(err)
		}
		finish := func(service, option string) host.RunInfo {
			ri := f.call("deploy", `{"service":"`+service+`"}`)
			if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
				t.Fatalf("run %+v", ri)
			}
			ri, err := f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: option})
			if err != nil {
				t.Fatal(err)
			}
			return ri
		}

		ok := finish("api", "approve")
		if ok.Status != store.StatusCompleted {
			t.Fatalf("a result that matches the schema: %+v", ok)
		}

		bad := finish("web", "cancel")
		var re *host.RunError
		if bad.Status != store.StatusFailed || !errors.As(bad.Err(), &re) || re.Type != abi.ErrTypeOutputSchema {
			t.Fatalf("a result without url should fail the run with %s: %+v", abi.ErrTypeOutputSchema, bad)
		}
		failed := eventsOf(t, f.h, bad.ID, host.EvRunFailed)
		if len(failed) != 1 || mustJSON(t, failed[0]["result"]) != `{"deployed":false,"reason":"rejected"}` {
			t.Errorf("run_failed should keep the result: %v", failed)
		}
		if len(eventsOf(t, f.h, bad.ID, host.EvRunCompleted)) != 0 {
			t.Error("the failed run also has run_completed")
		}

		var buf bytes.Buffer
		if err := f.h.ExportHistory(ctx, bad.ID, &buf); err != nil {
			t.Fatal(err)
		}
		hist, err := host.ReadHistory(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := f.h.CheckReplay(ctx, hist, wasm)
		if err != nil || rep.End != "completed" || rep.Outcome != host.OutcomeSame {
			t.Errorf("replay of the failed run: %+v %v", rep, err)
		}
	})
}
