package host_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// Fuzz targets for the decoders of untrusted files the host reads: history
// files (ReadHistory) and plugin manifests (ParseManifest). The fuzz
// functions add the golden histories (plain, compressed, truncated, with
// the wrong format or version) and the example manifests as they are on
// disk; testdata/fuzz/FuzzReadHistory/ and testdata/fuzz/FuzzParseManifest/
// hold handwritten ones: odd zstd frames, references outside the schema,
// deeply nested schemas, bad limits, and crash-* inputs of bugs found.

var (
	fuzzZstdOnce sync.Once
	fuzzZstdEnc  *zstd.Encoder
)

// fuzzZstd compresses b as ExportHistory would.
func fuzzZstd(t testing.TB, b []byte) []byte {
	fuzzZstdOnce.Do(func() {
		var err error
		fuzzZstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err)
		}
	})
	return fuzzZstdEnc.EncodeAll(b, nil)
}

var fuzzZstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// fuzzHistorySeeds returns the golden histories and variants of them.
func fuzzHistorySeeds(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden histories: %v", err)
	}
	var seeds [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	g := seeds[0]
	z := fuzzZstd(t, g)
	seeds = append(seeds,
		z,
		z[:len(z)/2], // a truncated frame
		z[:4],        // the magic alone
		g[:len(g)/2], // truncated JSON
		bytes.Replace(g, []byte(`"format": "sandflow.history"`), []byte(`"format": "sandflow.hist"`), 1),
		bytes.Replace(g, []byte(`"version": 1`), []byte(`"version": 2`), 1),
	)
	return seeds
}

// FuzzReadHistory: ReadHistory never panics; everything it refuses is an
// error wrapping ErrBadHistory; what it accepts has the format, the
// version, at least one event and a valid run id; and it reads the same
// whether compressed or not, and again after writing it back out.
func FuzzReadHistory(f *testing.F) {
	for _, s := range fuzzHistorySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hist, err := host.ReadHistory(bytes.NewReader(b))
		out := checkReadHistory(t, "input", hist, err)

		if !bytes.HasPrefix(b, fuzzZstdMagic) {
			zhist, zerr := host.ReadHistory(bytes.NewReader(fuzzZstd(t, b)))
			zout := checkReadHistory(t, "compressed input", zhist, zerr)
			if (err == nil) != (zerr == nil) || !bytes.Equal(out, zout) {
				t.Fatalf("compressed, the history reads differently: plain err %v, compressed err %v", err, zerr)
			}
		}
		if err != nil {
			return
		}
		again, err := host.ReadHistory(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("a history ReadHistory accepted does not read back once written out: %v", err)
		}
		if out2 := checkReadHistory(t, "written-out history", again, nil); !bytes.Equal(out, out2) {
			t.Fatalf("written out and read back, the history changed:\n%s\n%s", out, out2)
		}
	})
}

// checkReadHistory checks one ReadHistory outcome and returns the history
// written out as JSON (nil on error).
func checkReadHistory(t *testing.T, what string, hist *host.History, err error) []byte {
	t.Helper()
	if err != nil {
		if !errors.Is(err, host.ErrBadHistory) {
			t.Fatalf("%s: error %v does not wrap ErrBadHistory", what, err)
		}
		if hist != nil {
			t.Fatalf("%s: ReadHistory returned a history with error %v", what, err)
		}
		return nil
	}
	if hist == nil {
		t.Fatalf("%s: ReadHistory returned neither a history nor an error", what)
	}
	if hist.Format != host.HistoryFormat || hist.Version != 1 {
		t.Fatalf("%s: accepted format %q version %d", what, hist.Format, hist.Version)
	}
	if len(hist.Events) == 0 {
		t.Fatalf("%s: accepted a history with no events", what)
	}
	if err := store.ValidRunID(hist.Run.ID); err != nil {
		t.Fatalf("%s: accepted run id %q: %v", what, hist.Run.ID, err)
	}
	out, err := json.Marshal(hist)
	if err != nil {
		t.Fatalf("%s: an accepted history does not encode: %v", what, err)
	}
	return out
}

// fuzzManifestSeeds returns the example manifests.
func fuzzManifestSeeds(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*", "manifest.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example manifests: %v", err)
	}
	files = append(files, filepath.Join("testdata", "guests", "kitchen", "manifest.json"))
	var seeds [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzParseManifest: ParseManifest never panics; every refusal wraps
// ErrBadManifest; it accepts only a single JSON value; and a manifest it
// accepts is accepted again after the host stores it (AddPlugin keeps
// json.Marshal of it and reloads it).
func FuzzParseManifest(f *testing.F) {
	for _, s := range fuzzManifestSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := host.ParseManifest(b)
		if err != nil {
			if !errors.Is(err, host.ErrBadManifest) {
				t.Fatalf("error %v does not wrap ErrBadManifest", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted input that is not a single JSON value: %q", b)
		}
		if m.Name == "" || (m.Entry != host.EntryExecute && m.Entry != host.EntryTask && m.Entry != host.EntryServe) || len(m.InputSchema) == 0 {
			t.Fatalf("accepted a manifest without a name, an entry or an input schema: %+v", m)
		}
		stored, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("an accepted manifest does not encode: %v", err)
		}
		if _, err := host.ParseManifest(stored); err != nil {
			t.Fatalf("an accepted manifest is refused once stored: %v\nstored: %s", err, stored)
		}
	})
}

// TestParseManifestNeverLoadsReferences: a schema that refers outside
// itself is refused, and what it names is never fetched or read. Each
// reference names something that would make the schema valid if loaded.
func TestParseManifestNeverLoadsReferences(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "s.json")
	if err := os.WriteFile(file, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fileURL := "file://" + filepath.ToSlash(file)
	for _, schema := range []string{
		`{"type":"object","$ref":"file:///etc/passwd"}`,
		`{"type":"object","properties":{"a":{"$ref":"` + fileURL + `"}}}`,
		`{"type":"object","$id":"file://` + filepath.ToSlash(dir) + `/","properties":{"a":{"$ref":"s.json"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"` + srv.URL + `/s.json"}}}`,
		`{"type":"object","$schema":"` + srv.URL + `/meta.json"}`,
		`{"type":"object","$id":"` + srv.URL + `/x/","properties":{"a":{"$ref":"s.json"}}}`,
		`{"type":"object","properties":{"a":{"$dynamicRef":"` + srv.URL + `/s.json#x"}}}`,
	} {
		raw := []byte(`{"name":"t","entry":"execute","inputSchema":` + schema + `}`)
		if _, err := host.ParseManifest(raw); !errors.Is(err, host.ErrBadManifest) {
			t.Errorf("schema %s: ParseManifest = %v, want an error wrapping ErrBadManifest", schema, err)
		}
		raw = []byte(`{"name":"t","entry":"execute","inputSchema":{"type":"object"},"outputSchema":` + schema + `}`)
		if _, err := host.ParseManifest(raw); !errors.Is(err, host.ErrBadManifest) {
			t.Errorf("output schema %s: ParseManifest = %v, want an error wrapping ErrBadManifest", schema, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("schema references made %d requests", n)
	}
}

// TestRegressionParseManifestTrailingData: BUG. ParseManifest decodes the
// first JSON value with a json.Decoder and never checks that the input
// ends there (plugin.go, ParseManifest; decodeStrict in workflow.go does
// check dec.More), so a manifest file with anything after its object, a
// second object included, is accepted and the rest silently ignored.
func TestRegressionParseManifestTrailingData(t *testing.T) {
	for _, tail := range []string{` {"name":"other"}`, `garbage`, `]`} {
		raw := []byte(`{"name":"t","entry":"execute","inputSchema":{"type":"object"}}` + tail)
		if _, err := host.ParseManifest(raw); !errors.Is(err, host.ErrBadManifest) {
			t.Errorf("manifest followed by %q: ParseManifest = %v, want an error wrapping ErrBadManifest", tail, err)
		}
	}
}
