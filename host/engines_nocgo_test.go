//go:build !cgo

package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
)

// Without cgo there is no wasmtime, and NewEngine says why.
func TestNewEngineWithoutCgo(t *testing.T) {
	_, err := host.NewEngine(context.Background(), host.EngineWasmtime, "")
	if err == nil || !strings.Contains(err.Error(), "cgo") {
		t.Errorf("want an error naming cgo, got %v", err)
	}
}
