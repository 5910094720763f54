package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// hasEvent says whether a run's committed log holds an event of kind.
func hasEvent(t *testing.T, h *host.Host, runID, kind string) bool {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == kind {
			return true
		}
	}
	return false
}

// waitingDeploy uploads the deploy tool and starts a run that waits on its
// question.
func waitingDeploy(t *testing.T, e *env) (runID, askID string) {
	t.Helper()
	if r := e.upload(adminToken, guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	var started runReply
	e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"api"}`).json(t, &started)
	if started.Run.Status != store.StatusWaiting || len(started.Run.Waiting) != 1 {
		t.Fatalf("call: %+v", started.Run)
	}
	return started.Run.ID, started.Run.Waiting[0].AskID
}

// Regression: with wait=0, POST /v1/asks/{id}/answer answered 202 before
// ask_settled was committed (a kill a second later lost the answer), and
// a wrong option or a second answer got 202 too. A 2xx now means the
// answer is in the store, and a refusal is a 4xx however short the wait.
func TestAnswerIsCommittedBeforeTheReply(t *testing.T) {
	e := newEnv(t, nil, nil)
	runID, askID := waitingDeploy(t, e)

	if r := e.post("/v1/asks/"+askID+"/answer?wait=0", `{"optionId":"no-such-option"}`); r.status != http.StatusBadRequest || r.code(t) != "bad_request" {
		t.Fatalf("wrong option with wait=0: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/asks/ask_unknown/answer?wait=0", `{"optionId":"approve"}`); r.status != http.StatusNotFound {
		t.Fatalf("unknown question with wait=0: %d %s", r.status, r.body)
	}
	if q, err := e.h.Question(context.Background(), askID); err != nil || !q.Open {
		t.Fatalf("a refused answer changed the question: %+v %v", q, err)
	}

	r := e.post("/v1/asks/"+askID+"/answer?wait=0", `{"optionId":"approve"}`)
	if r.status != http.StatusOK && r.status != http.StatusAccepted {
		t.Fatalf("answer with wait=0: %d %s", r.status, r.body)
	}
	var got runReply
	r.json(t, &got)
	if got.Run.ID != runID {
		t.Fatalf("the reply names run %q, want %q", got.Run.ID, runID)
	}
	// Read straight after the reply: nothing may still be on its way.
	if q, err := e.h.Question(context.Background(), askID); err != nil || q.Open {
		t.Fatalf("after a 2xx the question is still open: %+v %v", q, err)
	}
	if !hasEvent(t, e.h, runID, host.EvAskSettled) {
		t.Fatal("after a 2xx the log has no ask_settled")
	}
	if r := e.post("/v1/asks/"+askID+"/answer?wait=0", `{"optionId":"approve"}`); r.status != http.StatusConflict || r.code(t) != "conflict" {
		t.Fatalf("second answer with wait=0: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/asks/"+askID+"/withdraw?wait=0", ``); r.status != http.StatusConflict {
		t.Fatalf("withdraw after the answer with wait=0: %d %s", r.status, r.body)
	}
}

func TestWithdrawIsCommittedBeforeTheReply(t *testing.T) {
	e := newEnv(t, nil, nil)
	runID, askID := waitingDeploy(t, e)
	r := e.post("/v1/asks/"+askID+"/withdraw?wait=0", ``)
	if r.status != http.StatusOK && r.status != http.StatusAccepted {
		t.Fatalf("withdraw with wait=0: %d %s", r.status, r.body)
	}
	if q, err := e.h.Question(context.Background(), askID); err != nil || q.Open {
		t.Fatalf("after a 2xx the question is still open: %+v %v", q, err)
	}
	if !hasEvent(t, e.h, runID, host.EvAskSettled) {
		t.Fatal("after a 2xx the log has no ask_settled")
	}
	if r := e.post("/v1/asks/"+askID+"/answer?wait=0", `{"optionId":"approve"}`); r.status != http.StatusConflict {
		t.Fatalf("answer after the withdrawal with wait=0: %d %s", r.status, r.body)
	}
}

// A call, a hook resume and a webhook request with wait=0: each 2xx is
// given after what it delivered is committed, and a refusal is a 4xx.
func TestDeliveriesAreCommittedBeforeTheReply(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "host/testdata/guests/kitchen"), repoFile(t, "host/testdata/guests/kitchen/manifest.json")); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	t.Run("call", func(t *testing.T) {
		r := e.post("/v1/tools/kitchen/calls?wait=0", `{"mode":"steps","n":50}`)
		if r.status != http.StatusAccepted && r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var started runReply
		r.json(t, &started)
		if !hasEvent(t, e.h, started.Run.ID, host.EvRunCreated) {
			t.Fatal("after a 2xx the run is not stored")
		}
		if r := e.post("/v1/tools/kitchen/calls?wait=0", `{"n":1}`); r.status != http.StatusBadRequest {
			t.Fatalf("bad input with wait=0: %d %s", r.status, r.body)
		}
	})
	t.Run("hook", func(t *testing.T) {
		var hooked runReply
		e.post("/v1/tools/kitchen/calls?wait=30s", `{"mode":"hooks","token":"ack-hook","n":1}`).json(t, &hooked)
		if hooked.Run.Status != store.StatusWaiting {
			t.Fatalf("%+v", hooked.Run)
		}
		if r := e.post("/v1/hooks/ack-unknown?wait=0", `{}`); r.status != http.StatusNotFound {
			t.Fatalf("unknown hook with wait=0: %d %s", r.status, r.body)
		}
		if r := e.post("/v1/hooks/ack-hook?wait=0", `{"paid":true}`); r.status != http.StatusOK && r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if !hasEvent(t, e.h, hooked.Run.ID, host.EvHookReceived) {
			t.Fatal("after a 2xx the log has no hook_received")
		}
	})
	t.Run("webhook", func(t *testing.T) {
		var started runReply
		e.post("/v1/tools/kitchen/calls?wait=30s", `{"mode":"webhook","n":1}`).json(t, &started)
		var p struct{ URL string }
		if err := json.Unmarshal(started.Run.Progress, &p); err != nil || p.URL == "" {
			t.Fatalf("webhook url: %s (%v)", started.Run.Progress, err)
		}
		resp, err := e.client.Post(p.URL, "application/json", strings.NewReader(`{"status":"ok"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("webhook: %d", resp.StatusCode)
		}
		if !hasEvent(t, e.h, started.Run.ID, host.EvHookReceived) {
			t.Fatal("after a 2xx the log has no hook_received")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		var started runReply
		e.post("/v1/tools/kitchen/calls?wait=30s", `{"mode":"hooks","token":"ack-cancel","n":1}`).json(t, &started)
		if r := e.post("/v1/runs/"+started.Run.ID+"/cancel", ``); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if !hasEvent(t, e.h, started.Run.ID, host.EvRunCancelled) {
			t.Fatal("after a 2xx the log has no run_cancelled")
		}
		if r := e.post("/v1/runs/"+started.Run.ID+"/cancel", ``); r.status != http.StatusConflict {
			t.Fatalf("second cancel: %d %s", r.status, r.body)
		}
	})
}

// GET /v1/asks/{id} is one question whole, open or settled; GET
// /v1/runs/{id}/history is the file `sandflow runs export` writes.
func TestShowAskAndRunHistory(t *testing.T) {
	e := newEnv(t, nil, nil)
	runID, askID := waitingDeploy(t, e)
	var shown struct {
		Ask host.Question `json:"ask"`
	}
	e.get("/v1/asks/"+askID).json(t, &shown)
	if shown.Ask.ID != askID || shown.Ask.RunID != runID || !shown.Ask.Open || len(shown.Ask.Request.Options) == 0 {
		t.Errorf("GET /v1/asks/%s: %+v", askID, shown.Ask)
	}
	if r := e.get("/v1/asks/ask_unknown"); r.status != http.StatusNotFound || r.code(t) != "not_found" {
		t.Errorf("an unknown question: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/asks/"+askID+"/answer?wait=30s", `{"optionId":"approve"}`); r.status != http.StatusOK {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	e.get("/v1/asks/"+askID).json(t, &shown)
	if shown.Ask.Open {
		t.Errorf("an answered question is shown open: %+v", shown.Ask)
	}

	r := e.get("/v1/runs/" + runID + "/history")
	if r.status != http.StatusOK {
		t.Fatalf("history: %d %s", r.status, r.body)
	}
	hist, err := host.ReadHistory(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := e.h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if hist.Run.ID != runID || hist.Run.Status != store.StatusCompleted || len(hist.Events) != len(evs) {
		t.Errorf("history: run %+v, %d events, the log has %d", hist.Run, len(hist.Events), len(evs))
	}
	if r := e.get("/v1/runs/run_unknown/history"); r.status != http.StatusNotFound || r.code(t) != "not_found" {
		t.Errorf("an unknown run's history: %d %s", r.status, r.body)
	}
}
