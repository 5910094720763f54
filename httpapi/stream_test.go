package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/sandflow/sandflow/store"
)

// An ended run's event stream, read whole, is the bytes the API wrote
// when it framed events by hand: for each log entry "id: SEQ", "event:
// KIND" and its JSON on one data line, then the end event with the run's
// status, and the stream closes.
func TestEndedRunStreamIsTheLogFramed(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	var call runReply
	r := e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"api"}`)
	r.json(t, &call)
	if r.status != http.StatusOK || len(call.Run.Waiting) != 1 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	r = e.post("/v1/asks/"+call.Run.Waiting[0].AskID+"/answer?wait=30s", `{"optionId":"approve"}`)
	r.json(t, &call)
	if r.status != http.StatusOK || call.Run.Status != store.StatusCompleted {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	resp := e.stream(call.Run.ID, 0)
	defer resp.Body.Close()
	if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control %q, want no-cache", got)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := e.h.Store().Events(context.Background(), call.Run.ID, 0, 1000)
	if err != nil || len(evs) < 2 {
		t.Fatalf("events: %d, %v", len(evs), err)
	}
	var want []byte
	for _, ev := range evs {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		want = fmt.Appendf(want, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Kind, data)
	}
	want = fmt.Appendf(want, "event: end\ndata: {\"status\":%q}\n\n", call.Run.Status)
	if string(body) != string(want) {
		t.Errorf("the stream:\n%s\nwant\n%s", body, want)
	}
}
