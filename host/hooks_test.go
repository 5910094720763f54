package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestReviewDisposeTwiceReleasesLiveHooksToken: BUG (host/workflow.go
// perform, OpHookDispose). hook_dispose on a hook that is already disposed
// releases its token again. When the run has meanwhile created another hook
// on the same token, that release drops the *live* hook's claim from the
// store's index: resumeHook(token) answers ErrUnknownHook although the run
// waits on the hook, and any other run may now claim the token.
func TestReviewDisposeTwiceReleasesLiveHooksToken(t *testing.T) {
	r := newReview(t, nil)
	ctx := context.Background()
	ri := r.call("review", `{"mode":"hook-redispose","token":"orders-7"}`)
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
