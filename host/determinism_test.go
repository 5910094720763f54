package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestReviewMetadataIsNotRecorded: BUG (host/host.go metadata; workflow.go
// OpMetadata). The metadata op is answered from the host's configuration
// (Options.BaseURL), not from the log, so a replay after a restart with
// another BaseURL sees other metadata than the original execution. A
// deterministic body that branches on it (here: it publishes the URL as
// progress only when there is one) is then stalled as non-deterministic.
// abi/README.md: "A guest cannot tell the two apart"; the guest should see
// only what the log holds (record the metadata in run_created, or answer
// it from there).
func TestReviewMetadataIsNotRecorded(t *testing.T) {
	r := newReview(t, &host.Options{BaseURL: "https://old.invalid"})
	ctx := context.Background()
	ri := r.call("review", `{"mode":"metadata-url","ms":1}`)
	if ri.Status != store.StatusWaiting {
		t.Fatalf("%+v", ri)
	}
	// The operator moves the UI; the process restarts.
	r.opts.BaseURL = ""
	r.restart()
	if _, err := r.h.FireDue(ctx, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	ri, err := r.h.Drive(ctx, ri.ID)
	if errors.Is(err, host.ErrNonDeterminism) || ri.Stalled != "" {
		t.Fatalf("a deterministic guest is stalled after a restart with another BaseURL: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := result[string](t, ri); got != "ok" {
		t.Errorf("%q", got)
	}
}
