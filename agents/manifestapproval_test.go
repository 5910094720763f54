package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// sumTwice scripts the model: the kitchen tool in steps mode, then in
// count mode, then an answer with both results.
func sumTwice(n int, req chatReq) (int, string) {
	res := req.toolResults()
	switch {
	case res["c1"] == "":
		return 200, reply("", call{"c1", "sum", `{"mode":"steps","n":4}`})
	case res["c2"] == "":
		return 200, reply("", call{"c2", "sum", `{"mode":"count","token":"m1"}`})
	}
	return 200, reply(fmt.Sprintf("%s then %s", res["c1"], res["c2"]))
}

// Approval rules declared in a tool's manifest: the kitchen tool's new
// version asks before a call in count mode only, so the model's first
// call runs at once and its second waits as a question until approved.
// An agent that sets the tool's approval itself overrides the manifest.
func TestLoopApprovalFromManifest(t *testing.T) {
	for _, c := range []struct {
		name      string
		approval  string
		questions int
	}{{"manifest", "", 1}, {"agent overrides", agents.ApprovalNever, 0}} {
		t.Run(c.name, func(t *testing.T) {
			m := &fakeModel{reply: sumTwice}
			lh := newLoopHost(t, m, agents.LoopAgent{Name: "summer", Tools: []agents.LoopTool{{Tool: "kitchen", Name: "sum", Approval: c.approval}}})
			mf := testhost.Manifest(t, "host/testdata/guests/kitchen")
			mf.Approval = &plugins.ManifestApproval{Rules: []plugins.ApprovalRule{{Field: "mode", Match: "^count$", Approval: agents.ApprovalAlways}}}
			if _, err := lh.H.AddPlugin(context.Background(), testhost.Guest(t, "host/testdata/guests/kitchen"), mf); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ri, err := lh.H.Start(ctx, agents.LoopToolName("summer"), json.RawMessage(`{"message":"go"}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			go lh.H.Drive(ctx, ri.ID)
			if c.questions == 1 {
				q := lh.question()
				if q.Request.Title != "Approve sum?" || m.count() != 2 {
					t.Fatalf("question %+v after %d model calls", q.Request, m.count())
				}
				if runs, _ := lh.H.Runs(ctx, store.RunFilter{Tool: "kitchen"}); len(runs) != 1 {
					t.Fatalf("%d runs of the tool before the approval, want 1 (steps mode needs none)", len(runs))
				}
				if _, err := lh.H.AnswerAsk(ctx, q.ID, host.Answer{OptionID: "approve"}); err != nil {
					t.Fatal(err)
				}
			}
			ri = lh.waitEnd(ri.ID)
			var turn struct {
				Reply     string
				Approvals []agents.Approval
			}
			if ri.Status != store.StatusCompleted || json.Unmarshal(ri.Result, &turn) != nil || turn.Reply != "6 then 1" || len(turn.Approvals) != c.questions {
				t.Fatalf("turn %s %s %+v", ri.Status, ri.Result, ri.Error)
			}
			if qs, _ := lh.H.Questions(ctx, false); len(qs) != c.questions {
				t.Errorf("%d questions, want %d", len(qs), c.questions)
			}
		})
	}
}

// A manifest's approval is checked when the plugin is added.
func TestManifestApprovalIsChecked(t *testing.T) {
	for _, a := range []plugins.ManifestApproval{{Policy: "sometimes"}, {Rules: []plugins.ApprovalRule{{Field: "env", Match: "(", Approval: "always"}}},
		{Rules: []plugins.ApprovalRule{{Match: "x", Approval: "always"}}}} {
		mf := testhost.Manifest(t, "host/testdata/guests/kitchen")
		mf.Approval = &a
		if _, err := mf.Check(plugins.DefaultLimits); !errors.Is(err, plugins.ErrBadManifest) {
			t.Errorf("%+v: %v", a, err)
		}
	}
}
