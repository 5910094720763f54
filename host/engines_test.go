package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/host"
)

func TestNewEngine(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"", "wazero"} {
		dir := filepath.Join(t.TempDir(), "cache", "wazero")
		e, err := host.NewEngine(ctx, name, dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := e.(*host.WazeroEngine); !ok {
			t.Errorf("NewEngine(%q) made a %T", name, e)
		}
		e.Close(ctx)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Errorf("cache dir not made: %v", err)
		}
	}
	if _, err := host.NewEngine(ctx, "v8", ""); !errors.Is(err, host.ErrUnknownEngine) {
		t.Errorf("unknown engine: %v", err)
	}
}
