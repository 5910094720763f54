package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// The release-plan serve tool as a Go guest: the first call is
// answered and the run waits on receive (the task is idle); a call sent
// to the run is received and answered, across a restart, with each
// revision's side effect run once; a call past the end is refused; the
// history replays op for op.
func TestServeGoGuest(t *testing.T) {
	f := newFixture(t, nil)
	f.add("examples/release-plan")
	ctx := context.Background()

	ri := f.call("release-plan", `{"request":"draft 2.0"}`)
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "receive" || ri.Working() {
		t.Fatalf("after the first call: %s %+v", ri.Status, ri.Waiting)
	}
	if len(ri.Calls) != 1 || ri.Calls[0].Status != "completed" || ri.Calls[0].CallID != ri.ID ||
		string(ri.Calls[0].Output) != `{"revision":1,"requests":["draft 2.0"],"steps":["freeze the release branch","run the release checklist","tag and publish"]}` {
		t.Fatalf("the first call: %+v", ri.Calls)
	}

	f.restart()
	if idx, err := f.h.SendCall(ctx, ri.ID, "c-1", json.RawMessage(`{"request":"add a canary"}`)); err != nil || idx != 1 {
		t.Fatalf("SendCall: %d %v", idx, err)
	}
	ri, err := f.h.Drive(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ri.Calls) != 2 || ri.Calls[1].Status != "completed" || ri.Calls[1].CallID != "c-1" ||
		string(ri.Calls[1].Output) != `{"revision":2,"requests":["draft 2.0","add a canary"],"steps":["freeze the release branch","run the release checklist","a canary","tag and publish"]}` {
		t.Fatalf("the second call: %+v", ri.Calls)
	}
	evs, err := f.h.Events(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
		if e.Kind == host.EvOutput {
			out.Write(e.Data)
		}
	}
	for _, want := range []string{`revision 1 for \"draft 2.0\"`, `revision 2 for \"add a canary\"`} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%s ran %d times", want, n)
		}
	}
	if kinds[host.EvCallReceived] != 1 || kinds[host.EvReceive] != 3 || kinds[host.EvReplied] != 2 {
		t.Errorf("events: %v", kinds)
	}

	var ie *host.InputError
	if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"request":""}`)); !errors.As(err, &ie) {
		t.Errorf("an input the schema refuses: %v", err)
	}
	if _, err := f.h.Cancel(ctx, ri.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"request":"more"}`)); !errors.Is(err, host.ErrRunEnded) {
		t.Errorf("a call after the end: %v", err)
	}
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.h.CheckReplay(ctx, hist, nil); err != nil || rep.Ops != rep.RecordedOps || rep.Ops != 7 {
		t.Errorf("replay: %+v %v", rep, err)
	}
}

// A history whose reply claims more answered calls than were waiting is
// refused as a bad history.
func TestServeBadHistory(t *testing.T) {
	f := newFixture(t, nil)
	f.add("examples/release-plan")
	ctx := context.Background()
	ri := f.call("release-plan", `{"request":"draft"}`)
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for i, e := range hist.Events {
		if e.Kind == host.EvReplied {
			var d map[string]any
			if err := json.Unmarshal(e.Data, &d); err != nil || d["answered"] != 1.0 {
				t.Fatalf("the reply event: %s %v", e.Data, err)
			}
			d["answered"] = 2
			hist.Events[i].Data, _ = json.Marshal(d)
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("no reply to damage in the history")
	}
	_, err = f.h.CheckReplay(ctx, hist, nil)
	if !errors.Is(err, host.ErrBadHistory) {
		t.Errorf("a reply answering calls that were not waiting: %v", err)
	}
}
