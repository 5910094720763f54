package host_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// wazeroEntries lists the wazero compile cache's entries under dir.
func wazeroEntries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(p, ".sum") {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A damaged wazero compile-cache entry is found by its checksum when the
// next engine starts, discarded, and the module compiled again; wazero
// on its own refused the module until the entry was deleted by hand.
func TestWazeroDamagedCacheEntryIsRecompiled(t *testing.T) {
	ctx := context.Background()
	wasm := wasmtest.Guest(wasmtest.Loop)
	for name, damage := range map[string]func(b []byte) []byte{
		"one bit flipped": func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b },
		"cut short":       func(b []byte) []byte { return b[:len(b)/2] },
		"empty":           func(b []byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := host.NewWazeroEngine(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			cm, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			cm.Close(ctx)
			e.Close(ctx)
			entries := wazeroEntries(t, dir)
			if len(entries) != 1 {
				t.Fatalf("cache holds %v, want one entry", entries)
			}
			if _, err := os.Stat(entries[0] + ".sum"); err != nil {
				t.Fatalf("the entry has no checksum: %v", err)
			}
			if n, bad, err := host.VerifyCache(dir); n != 1 || len(bad) != 0 || err != nil {
				t.Fatalf("VerifyCache of the clean cache: %d, %v, %v", n, bad, err)
			}
			good, _ := os.ReadFile(entries[0])
			bad := damage(bytes.Clone(good))
			if err := os.WriteFile(entries[0], bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if n, found, err := host.VerifyCache(dir); n != 1 || len(found) != 1 || err != nil {
				t.Fatalf("VerifyCache of the damaged cache: %d, %v, %v", n, found, err)
			}
			if now, _ := os.ReadFile(entries[0]); !bytes.Equal(now, bad) {
				t.Fatal("VerifyCache changed the entry")
			}

			e, err = host.NewWazeroEngine(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			cm, err = e.Compile(ctx, wasm)
			if err != nil {
				t.Fatalf("a damaged cache entry made Compile fail: %v", err)
			}
			cm.Close(ctx)
			if now, err := os.ReadFile(entries[0]); err != nil || bytes.Equal(now, bad) {
				t.Fatalf("the damaged entry is still there (%v)", err)
			}
			if n, found, err := host.VerifyCache(dir); n != 1 || len(found) != 0 || err != nil {
				t.Fatalf("VerifyCache after the recompile: %d, %v, %v", n, found, err)
			}
		})
	}
}
