package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var ctxBG = context.Background()

func mustCreate(t *testing.T, s Store, id string, events int) Run {
	t.Helper()
	run := Run{ID: id, Tool: "t", Status: StatusRunning, CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 1, time.UTC), LastSeq: uint64(events)}
	var evs []Event
	for i := 1; i <= events; i++ {
		evs = append(evs, Event{Seq: uint64(i), Time: time.Unix(1700000000, int64(i)), Kind: "e", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	if err := s.CreateRun(ctxBG, run, Batch{Events: evs}); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
	return run
}

func TestRunStatusTerminal(t *testing.T) {
	for s, want := range map[RunStatus]bool{
		StatusRunning: false, StatusWaiting: false, StatusCompleted: true, StatusFailed: true, StatusCancelled: true, "": false,
	} {
		if s.Terminal() != want {
			t.Errorf("%q.Terminal() = %v", s, !want)
		}
	}
}

// Corrupt stored values are reported as ErrCorrupt, not as a panic or as
// garbage data.
func TestCorruptValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corrupt.db")
	s, err := Open(path, &Options{NoSync: true, CompressThreshold: 8})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "r", 2)
	if _, err := s.PutPlugin(ctxBG, Plugin{Name: "p", ModuleHash: "h"}, bytes.Repeat([]byte("abc"), 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimHook(ctxBG, "tok", "r", 1); err != nil {
		t.Fatal(err)
	}
	s.Close()

	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		ev := tx.Bucket(bucketEvents)
		v := bytes.Clone(ev.Get(eventKey("r", 2)))
		v[len(v)-len(`{"i":2}`)-1] = 0x09 // unknown flag byte
		if err := ev.Put(eventKey("r", 2), v); err != nil {
			return err
		}
		m := bytes.Clone(tx.Bucket(bucketModules).Get([]byte("h")))
		if m[0] != flagZstd {
			return fmt.Errorf("module not compressed")
		}
		if err := tx.Bucket(bucketModules).Put([]byte("h"), m[:len(m)/2]); err != nil { // truncated frame
			return err
		}
		if err := tx.Bucket(bucketHooks).Put([]byte("tok"), []byte("{")); err != nil {
			return err
		}
		return tx.Bucket(bucketPlugins).Put(pluginKey("p", 2), []byte("not json"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if evs, err := s.Events(ctxBG, "r", 0, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Events over a corrupt event = %d events, %v; want ErrCorrupt", len(evs), err)
	}
	if evs, err := s.Events(ctxBG, "r", 0, 1); err != nil || len(evs) != 1 {
		t.Errorf("Events before the corrupt event = %d, %v", len(evs), err)
	}
	if _, err := s.Module(ctxBG, "h"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Module with a truncated frame = %v, want ErrCorrupt", err)
	}
	if _, err := s.Hook(ctxBG, "tok"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Hook with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.Plugin(ctxBG, "p", 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Plugin latest with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.Plugins(ctxBG); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Plugins with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.ClaimHook(ctxBG, "tok", "r", 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ClaimHook over broken JSON = %v, want ErrCorrupt", err)
	}
}

func TestUnpackValueCorrupt(t *testing.T) {
	z := packValue(nil, bytes.Repeat([]byte("0123456789"), 50), 1)
	if z[0] != flagZstd {
		t.Fatal("expected a compressed value")
	}
	for name, v := range map[string][]byte{
		"empty":          nil,
		"unknown flag":   {2, '{', '}'},
		"flag 0xff":      {0xff},
		"truncated zstd": z[:len(z)-3],
		"zstd bad magic": append([]byte{flagZstd, 0, 0, 0, 0}, z[5:]...),
		"zstd garbage":   []byte("\x01garbage that is no zstd frame"),
	} {
		if out, err := unpackValue(v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("unpackValue(%s) = %q, %v; want ErrCorrupt", name, trunc(out), err)
		}
	}
	for name, v := range map[string][]byte{
		"short":          make([]byte, 9),
		"kind length 0":  append(make([]byte, 8), 0, flagRaw),
		"kind past end":  append(make([]byte, 8), 5, 'a', 'b', flagRaw),
		"no data flag":   append(make([]byte, 8), 2, 'a', 'b'),
		"unknown flag":   append(make([]byte, 8), 1, 'a', 7),
		"truncated zstd": append(append(make([]byte, 8), 1, 'a'), z[:len(z)/2]...),
	} {
		if _, err := decodeEvent(1, v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeEvent(%s) = %v, want ErrCorrupt", name, err)
		}
	}
}
