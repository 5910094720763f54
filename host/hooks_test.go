package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// Disposing of a hook that is already disposed changes nothing: when the
// run has meanwhile created another hook on the same token, the live
// hook keeps its claim on the token, and ResumeHook delivers to it.
func TestDisposeTwiceKeepsTheLiveHookOnItsToken(t *testing.T) {
	r := newEdgeCases(t, nil)
	ctx := context.Background()
	ri := r.call("edgecases", `{"mode":"hook-redispose","token":"orders-7"}`)
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "hook" {
		t.Fatalf("want a wait on the second hook: %+v", ri)
	}
	ri, err := r.h.ResumeHook(ctx, "orders-7", json.RawMessage(`{"n":1}`))
	if errors.Is(err, host.ErrUnknownHook) {
		t.Fatalf("the run waits on a live hook with token orders-7, but ResumeHook says: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := result[map[string]any](t, ri); mustJSON(t, got["payload"]) != `{"n":1}` {
		t.Errorf("%v", got)
	}
}
