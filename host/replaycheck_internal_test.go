package host

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

// A ReplayChecker shares the host's copy of its module, and when the host
// lets go of the module (more modules checked ad hoc than it keeps), the
// next check finds it again: a new pool, the same module.
func TestReplayCheckerFindsItsModuleAgain(t *testing.T) {
	h, _ := benchHost(t, nil)
	ctx := context.Background()
	rs := stepsHistory(t, h, 3)
	var buf bytes.Buffer
	if err := h.ExportHistory(ctx, rs.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wasm := guestbuild.MustRead(filepath.Join(root, "host/testdata/guests/kitchen"))
	c, err := h.NewReplayChecker(ctx, wasm, "")
	if err != nil {
		t.Fatal(err)
	}
	first := c.lp
	if &c.module[0] == &wasm[0] || !bytes.Equal(c.module, wasm) {
		t.Fatal("the checker holds the caller's bytes, or other bytes")
	}
	for i := range maxAdHoc {
		other := append(bytes.Clone(wasm), 0, 3, 1, 'x', byte('0'+i)) // a custom section "x"
		if _, err := h.NewReplayChecker(ctx, other, ""); err != nil {
			t.Fatal(err)
		}
	}
	if !first.isClosed() {
		t.Fatal("the checker's module is still among the host's after more than it keeps")
	}
	rep, err := c.Check(ctx, hist)
	if err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
		t.Fatalf("%+v %v", rep, err)
	}
	if c.lp == first || c.lp.isClosed() || c.lp.p.ModuleHash != first.p.ModuleHash {
		t.Errorf("after the host let go of it: the same plugin %v, closed %v, module %s (was %s)",
			c.lp == first, c.lp.isClosed(), c.lp.p.ModuleHash, first.p.ModuleHash)
	}
}

// ReadHistory gives each event's data as the store holds it, without the
// file's indentation, whether or not the file was compressed.
func TestReadHistoryCompactsData(t *testing.T) {
	h, _ := benchHost(t, nil)
	ctx := context.Background()
	rs := stepsHistory(t, h, 3)
	evs, err := h.store.Events(ctx, rs.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := h.ExportHistory(ctx, rs.ID, &buf); err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := zr.DecodeAll(buf.Bytes(), nil)
	zr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(plain, []byte("\n    \"op\": 1")) {
		t.Fatalf("the file is not indented as this test expects:\n%.300s", plain)
	}
	for name, file := range map[string][]byte{"compressed": buf.Bytes(), "plain": plain} {
		hist, err := ReadHistory(bytes.NewReader(file))
		if err != nil {
			t.Fatal(name, err)
		}
		if len(hist.Events) != len(evs) {
			t.Fatalf("%s: %d events, the store has %d", name, len(hist.Events), len(evs))
		}
		for i, e := range hist.Events {
			if !bytes.Equal(e.Data, evs[i].Data) {
				t.Errorf("%s: event %d data %s, the store holds %s", name, e.Seq, e.Data, evs[i].Data)
			}
		}
	}
}
