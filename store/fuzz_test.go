package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/journal"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/: valid raw and zstd
// values, a truncated zstd frame, an unknown flag byte, a frame that
// claims a huge content size, and events with broken kind lengths.

var fuzzThresholds = []int{-1, 1, 64}

// FuzzUnpackValue: unpackValue never panics and fails only with
// ErrCorrupt; packValue followed by unpackValue gives the data back, and
// packing never makes a value more than one byte longer than its data.
func FuzzUnpackValue(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{flagRaw})
	f.Add([]byte{flagZstd})
	f.Add(append([]byte{flagRaw}, `{"a":1}`...))
	f.Add(packValue(nil, bytes.Repeat([]byte("abc"), 100), 1))
	f.Fuzz(func(t *testing.T, v []byte) {
		out, err := unpackValue(v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unpackValue(%x): error %v is not ErrCorrupt", v, err)
			}
		} else if v[0] == flagRaw && !bytes.Equal(out, v[1:]) {
			t.Fatalf("unpackValue of a raw value changed it")
		}

		// Roundtrip, with the data itself as input, appended after a prefix
		// as encodeEvent does.
		prefix := []byte("prefix")
		for _, thr := range fuzzThresholds {
			packed := packValue(bytes.Clone(prefix), v, thr)
			if !bytes.HasPrefix(packed, prefix) {
				t.Fatalf("packValue(thr %d) clobbered dst", thr)
			}
			stored := packed[len(prefix):]
			if len(stored) > len(v)+1 {
				t.Fatalf("packValue(thr %d) stored %d bytes for %d", thr, len(stored), len(v))
			}
			if stored[0] == flagZstd && (thr <= 0 || len(v) < thr) {
				t.Fatalf("packValue(thr %d) compressed %d bytes", thr, len(v))
			}
			got, err := unpackValue(stored)
			if err != nil {
				t.Fatalf("unpackValue(packValue(%x, thr %d)): %v", v, thr, err)
			}
			if !bytes.Equal(got, v) {
				t.Fatalf("roundtrip with thr %d: got %x, want %x", thr, got, v)
			}
		}
	})
}

// FuzzDecodeEvent: decodeEvent never panics and fails only with
// ErrCorrupt; what it decodes re-encodes to the same event; and
// encodeEvent followed by decodeEvent gives the event back, in UTC.
func FuzzDecodeEvent(f *testing.F) {
	raw, _ := encodeEvent(Event{Time: time.Unix(0, 1), Kind: "k", Data: []byte(`{}`)}, -1)
	f.Add(uint64(1), raw, int64(1736000000123456789), "step", []byte(`{"x":1}`))
	f.Add(uint64(0), []byte{}, int64(-1), "", []byte(nil))
	f.Fuzz(func(t *testing.T, seq uint64, v []byte, nanos int64, kind string, data []byte) {
		e, err := decodeEvent(seq, v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeEvent(%x): error %v is not ErrCorrupt", v, err)
			}
		} else {
			if e.Seq != seq || len(e.Kind) == 0 || len(e.Kind) > 255 || e.Time.Location() != time.UTC {
				t.Fatalf("decodeEvent(%d, %x) = %+v", seq, v, e)
			}
			for _, thr := range fuzzThresholds {
				again, err := encodeEvent(e, thr)
				if err != nil {
					t.Fatalf("re-encoding a decoded event: %v", err)
				}
				e2, err := decodeEvent(seq, again)
				if err != nil {
					t.Fatalf("decoding a re-encoded event: %v", err)
				}
				if d := diffEvent(e2, e); d != "" {
					t.Fatalf("re-encoded event differs: %s", d)
				}
			}
		}

		zones := []*time.Location{time.UTC, time.FixedZone("", -7*3600)}
		ev := Event{Seq: seq, Time: time.Unix(0, nanos).In(zones[nanos&1]), Kind: kind, Data: data}
		for _, thr := range fuzzThresholds {
			enc, err := encodeEvent(ev, thr)
			if len(kind) == 0 || len(kind) > 255 {
				if !errors.Is(err, ErrBadBatch) {
					t.Fatalf("encodeEvent with a %d-byte kind: %v, want ErrBadBatch", len(kind), err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("encodeEvent: %v", err)
			}
			got, err := decodeEvent(seq, enc)
			if err != nil {
				t.Fatalf("decodeEvent(encodeEvent(%+v)): %v", ev, err)
			}
			want := ev
			if len(want.Data) == 0 {
				want.Data = nil
			}
			if d := diffEvent(got, want); d != "" {
				t.Fatalf("roundtrip with thr %d: %s", thr, d)
			}
		}
	})
}

// FuzzJournalRecord: a journal whose record checks out but holds anything
// (the checksum protects against torn writes, not against a crafted
// file) never panics Open, which either applies it and opens, or fails
// with ErrCorrupt; and a journal of bytes that do not check out is
// ignored.
func FuzzJournalRecord(f *testing.F) {
	put := func(b bucketID, k, v string) []byte {
		w := wtx{rec: []byte{journal.OpPut, byte(b)}}
		w.rec = binary.AppendUvarint(w.rec, uint64(len(k)))
		w.rec = append(w.rec, k...)
		w.rec = binary.AppendUvarint(w.rec, uint64(len(v)))
		return append(w.rec, v...)
	}
	f.Add(put(bSessions, "s", "\x00data"), false)
	f.Add(append(put(bMeta, "k", "v"), journal.OpDelete, byte(bMeta), 1, 'k'), false)
	f.Add([]byte{journal.OpPut, 200, 1, 'k', 0}, false)
	f.Add([]byte{journal.OpDelete, byte(bRuns), 0}, false)
	f.Add([]byte{journal.OpPut, byte(bRuns), 0xff, 0xff, 0xff, 0xff, 0x0f}, true)
	f.Add([]byte{9}, true)
	template := filepath.Join(f.TempDir(), "template.db")
	s, err := Open(template, &Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	raw, err := os.ReadFile(template)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, damage bool) {
		if len(body) == 0 {
			return
		}
		path := filepath.Join(t.TempDir(), "s.db")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		w := wtx{rec: append(make([]byte, journal.Header), body...)}
		rec := w.seal(1)
		if damage {
			rec[len(rec)-1] ^= 0xff
		}
		if err := os.WriteFile(path+JournalSuffix, rec, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, &Options{NoSync: true})
		if err != nil {
			if damage || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open with a journal record %x (damaged %v): %v", body, damage, err)
			}
			return
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close after applying %x: %v", body, err)
		}
	})
}

// FuzzOpenDamaged damages a store file (cut at an offset, then bytes
// flipped: five bytes each, a big-endian offset and a mask) and opens,
// reads and verifies it. It never panics; Open fails only with errors
// that say the file is damaged; and whenever the reads fail, or read back
// other data than was stored, Verify reports damage. (A read may fail
// with a not-found error: a damaged key is found by Verify, whose
// checksums cover keys, not by a lookup of the key that was stored.)
func FuzzOpenDamaged(f *testing.F) {
	path := filepath.Join(f.TempDir(), "fixture.db")
	corpusFixture(f, path)
	base, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	s, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		f.Fatal(err)
	}
	want, err := corpusContents(s)
	s.Close()
	if err != nil {
		f.Fatal(err)
	}
	flipAt := func(off uint32, mask byte) []byte { return append(binary.BigEndian.AppendUint32(nil, off), mask) }
	f.Add(uint32(0), []byte{})
	f.Add(uint32(1), []byte{})
	f.Add(uint32(len(base)/2), []byte{})
	f.Add(uint32(0), flipAt(56, 4))
	f.Add(uint32(0), append(flipAt(24, 1), flipAt(4096+24, 1)...))
	f.Add(uint32(0), flipAt(5*4096+10, 0x40))
	f.Add(uint32(0), flipAt(7*4096+16+4, 0x10))
	f.Add(uint32(0), flipAt(uint32(bytes.Index(base, []byte("MARK-run-a-010"))), 1))
	f.Fuzz(func(t *testing.T, cut uint32, flips []byte) {
		db := bytes.Clone(base)
		if cut > 0 && int(cut) < len(db) {
			db = db[:cut]
		}
		for ; len(flips) >= 5 && len(db) > 0; flips = flips[5:] {
			mask := flips[4]
			if mask == 0 {
				mask = 1
			}
			db[binary.BigEndian.Uint32(flips)%uint32(len(db))] ^= mask
		}
		p := filepath.Join(t.TempDir(), "damaged.db")
		if err := os.WriteFile(p, db, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(p, &Options{ReadOnly: true})
		if err != nil {
			if !damageErr(err) {
				t.Fatalf("Open: %v, not an error that says the file is damaged", err)
			}
			return
		}
		got, rerr := corpusContents(s)
		if cerr := s.Close(); cerr != nil {
			t.Fatalf("Close: %v", cerr)
		}
		rep, err := Verify(p)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if (rerr != nil || got != want) && rep.OK() {
			t.Fatalf("the reads gave %v (data as stored: %v), and Verify found nothing", rerr, got == want)
		}
	})
}
