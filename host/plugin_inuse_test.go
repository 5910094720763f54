package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
)

// Deleting a plugin version a waiting run uses fails with ErrPluginInUse,
// and its message says so once, naming the version and the run.
func TestDeletePluginVersionInUse(t *testing.T) {
	f := newFixture(t, nil)
	f.add("examples/deploy")
	ri := f.call("deploy", `{"service":"api"}`)
	err := f.h.DeletePluginVersion(context.Background(), "deploy", 1)
	if !errors.Is(err, host.ErrPluginInUse) {
		t.Fatalf("delete: %v, want ErrPluginInUse", err)
	}
	msg := err.Error()
	if n := strings.Count(msg, "in use"); n != 1 || strings.Contains(msg, "store:") || !strings.Contains(msg, ri.ID) {
		t.Errorf("message %q: want the reason once, without the store's prefix, naming run %s", msg, ri.ID)
	}
}
