package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// BenchmarkUploadToFirstCall is what a user waits for after uploading a Go
// guest: the upload pipeline (checks, compilation with an empty cache, the
// probe instantiation) and the first call of the tool, to its result.
func BenchmarkUploadToFirstCall(b *testing.B) {
	wasm := module(b, "examples/deploy")
	raw, err := os.ReadFile(repoFile(b, "examples/deploy/manifest.json"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := host.ParseManifest(raw)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := b.TempDir()
				e := newEngine(b, name, filepath.Join(dir, "cache")) // empty: nothing compiled yet
				st, err := store.Open(filepath.Join(dir, "db"), nil)
				if err != nil {
					b.Fatal(err)
				}
				h, err := host.Open(ctx, st, &host.Options{Engine: e})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := h.AddPlugin(ctx, wasm, m); err != nil {
					b.Fatal(err)
				}
				ri, err := h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), nil)
				if err != nil || ri.Status != store.StatusWaiting {
					b.Fatalf("first call: %+v %v", ri, err)
				}
				b.StopTimer()
				h.Close(ctx)
				st.Close()
				e.Close(ctx)
				b.StartTimer()
			}
		})
	}
}
