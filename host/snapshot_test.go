package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestSnapshotRefusedFallsBackToReplay: a snapshot a run cannot use (one of
// another run, one ahead of its log) is refused, and the run resumes by
// replay with the same result as a run resumed from its own snapshot.
func TestSnapshotRefusedFallsBackToReplay(t *testing.T) {
	ctx := context.Background()
	k := newKitchen(t, &host.Options{MaxWarm: -1, Snapshots: 1})
	if k.h.SnapshotStats() != (host.SnapshotStats{}) {
		t.Fatalf("a new host has snapshot stats %+v", k.h.SnapshotStats())
	}
	a := k.run(`{"mode":"determinism","ms":300}`)
	b := k.run(`{"mode":"determinism","ms":300}`)
	c := k.run(`{"mode":"determinism","ms":300}`)
	k.h.WaitSnapshots()
	if st := k.h.SnapshotStats(); st.Taken != 3 {
		t.Fatalf("three runs suspended, snapshot stats %+v", st)
	}
	snapA, err := k.st.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// b's snapshot is replaced by a's, c's by its own from the future.
	if err := k.st.PutSnapshot(ctx, b.ID, store.Snapshot{Seq: 1 << 40, Data: snapA.Data}); err != nil {
		t.Fatal(err)
	}
	snapC, err := k.st.Snapshot(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.st.PutSnapshot(ctx, c.ID, store.Snapshot{Seq: 1<<40 + 1, Data: snapC.Data}); err != nil {
		t.Fatal(err)
	}
	k.restart()
	results := map[string]string{}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		ri := k.settle(id, 10*time.Second)
		if ri.Status != store.StatusCompleted {
			t.Fatalf("run %s: %s %v", id, ri.Status, ri.Error)
		}
		results[id] = string(ri.Result)
	}
	st := k.h.SnapshotStats()
	if st.Restored != 1 || st.Refused != 2 {
		t.Fatalf("snapshot stats %+v; want a restored, b and c refused", st)
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if _, err := k.st.Snapshot(ctx, id); err == nil {
			t.Errorf("run %s ended but its snapshot is kept", id)
		}
	}
	if results[a.ID] == results[b.ID] {
		t.Errorf("run b resumed with run a's state: both gave %s", results[a.ID])
	}
}

// TestSnapshotOfEvictedInstance: a parked instance evicted for another is
// snapshotted, and its run's resume restores it; the result is the one a
// replay gives.
func TestSnapshotOfEvictedInstance(t *testing.T) {
	k := newKitchen(t, &host.Options{MaxWarm: 1, Snapshots: 1})
	a := k.run(`{"mode":"determinism","ms":300}`)
	b := k.run(`{"mode":"determinism","ms":300}`) // parks b, evicting a
	k.h.WaitSnapshots()
	if st := k.h.SnapshotStats(); st.Taken != 1 {
		t.Fatalf("after an eviction, snapshot stats %+v; want one taken", st)
	}
	ra := k.settle(a.ID, 10*time.Second)
	if st := k.h.SnapshotStats(); st.Restored != 1 || st.Refused != 0 {
		t.Fatalf("snapshot stats %+v; want run a restored", st)
	}
	rb := k.settle(b.ID, 10*time.Second)
	if ra.Status != store.StatusCompleted || rb.Status != store.StatusCompleted {
		t.Fatalf("runs: %s %s", ra.Status, rb.Status)
	}
	var out map[string]observation
	if err := json.Unmarshal(ra.Result, &out); err != nil {
		t.Fatal(err)
	}
	var first observation
	if err := json.Unmarshal(a.Progress, &first); err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, out["before"]) != mustJSON(t, first) {
		t.Errorf("the restored run saw a different world:\n first    %+v\n restored %+v", first, out["before"])
	}
}

// logReads is a store that counts whole-log reads.
type logReads struct {
	*store.Bolt
	whole map[string]int
}

func (s *logReads) Events(ctx context.Context, runID string, after uint64, limit int) ([]store.Event, error) {
	if after == 0 {
		s.whole[runID]++
	}
	return s.Bolt.Events(ctx, runID, after, limit)
}

// TestIdleRunsKeepState: a suspended run without a parked instance keeps
// its state (Options.IdleRuns), so its resume does not read its log
// again; with IdleRuns negative, every resume reads it.
func TestIdleRunsKeepState(t *testing.T) {
	// Kept: the log is never read (Call builds the run's state as it
	// records it, and the state stays loaded). Not kept: each of the two
	// answers reads it.
	for _, tc := range []struct {
		idle     int
		minReads int
		maxReads int
	}{{0, 0, 0}, {-1, 2, 1 << 30}} {
		ctx := context.Background()
		bolt, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		st := &logReads{Bolt: bolt, whole: map[string]int{}}
		h, err := host.Open(ctx, st, &host.Options{MaxWarm: -1, IdleRuns: tc.idle, Snapshots: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
			t.Fatal(err)
		}
		ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"two-asks"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ri.Waiting) != 2 {
			t.Fatalf("waiting on %+v, want two questions", ri.Waiting)
		}
		asks := ri.Waiting
		for i, opt := range []string{"a", "b"} {
			if ri, err = h.AnswerAsk(ctx, asks[i].AskID, host.Answer{OptionID: opt}); err != nil {
				t.Fatal(err)
			}
		}
		if ri.Status != store.StatusCompleted {
			t.Fatalf("IdleRuns %d: run %s %+v", tc.idle, ri.Status, ri.Waiting)
		}
		if n := st.whole[ri.ID]; n < tc.minReads || n > tc.maxReads {
			t.Errorf("IdleRuns %d: the log was read whole %d times, want %d to %d", tc.idle, n, tc.minReads, tc.maxReads)
		}
		h.Close(ctx)
		bolt.Close()
	}
}

// TestStateImageAfterRestart: a long run waiting on questions is resumed
// after restarts from its snapshot and its state image, without its log
// being read from the start; the result is the one a replay gives. When
// the restored guest awaits a step from the start of its history, which
// the image left out, the state is completed from the log, once, and the
// value is the recorded one.
func TestStateImageAfterRestart(t *testing.T) {
	const steps = 150 // over DefaultSnapshotOps, so images are kept
	for _, tc := range []struct {
		mode      string
		sum       int
		completed int64
	}{
		{"held-step-unused", steps * (steps - 1) / 2, 0},
		{"held-step", steps*(steps-1)/2 + 1000, 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx := context.Background()
			k := newKitchen(t, &host.Options{MaxWarm: -1})
			ri := k.run(fmt.Sprintf(`{"mode":%q,"n":%d}`, tc.mode, steps))
			var answers []string
			var stats host.SnapshotStats
			for i := 0; ri.Status == store.StatusWaiting; i++ {
				k.h.WaitSnapshots()
				k.restart()
				reads := &logReads{Bolt: k.st, whole: map[string]int{}}
				h, err := host.Open(ctx, reads, &k.opts)
				if err != nil {
					t.Fatal(err)
				}
				k.h.Close(ctx)
				k.h = h
				askID := ""
				for _, w := range ri.Waiting {
					if w.Kind == "ask" {
						askID = w.AskID
					}
				}
				if askID == "" {
					t.Fatalf("run waits on %+v, not a question", ri.Waiting)
				}
				answer := fmt.Sprintf("a%d", i)
				answers = append(answers, answer)
				if ri, err = k.h.AnswerAsk(ctx, askID, host.Answer{Text: answer}); err != nil {
					t.Fatal(err)
				}
				st := k.h.SnapshotStats()
				if st.Images != 1 || st.Restored != 1 || st.ImagesRefused != 0 {
					t.Fatalf("answer %d after a restart: stats %+v; want the run loaded from its image and restored", i, st)
				}
				if n := reads.whole[ri.ID]; int64(n) != st.Completed {
					t.Fatalf("answer %d: the whole log was read %d times, states completed %d", i, n, st.Completed)
				}
				stats.Completed += st.Completed
			}
			got := result[struct {
				Sum     int      `json:"sum"`
				Answers []string `json:"answers"`
			}](t, ri)
			if got.Sum != tc.sum || mustJSON(t, got.Answers) != mustJSON(t, answers) {
				t.Fatalf("result %+v, want sum %d and answers %v", got, tc.sum, answers)
			}
			if stats.Completed != tc.completed {
				t.Fatalf("states completed from the log: %d, want %d", stats.Completed, tc.completed)
			}
			// The same run replayed from its log, with nothing kept, agrees.
			var buf bytes.Buffer
			if err := k.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
				t.Fatal(err)
			}
			hist, err := host.ReadHistory(&buf)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := k.h.CheckReplay(ctx, hist, nil)
			if err != nil || rep.End != "completed" {
				t.Fatalf("replay of the finished run: %+v %v", rep, err)
			}
		})
	}
}

// TestStateImageRefused: a state image that cannot be read, or that the
// log disagrees with, is not used: the run is loaded from its log, its
// answer resumes it, and it ends as it would have.
func TestStateImageRefused(t *testing.T) {
	const steps = 100
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, img []byte) []byte
	}{
		{"damaged", func(t *testing.T, img []byte) []byte { return img[:len(img)/2] }},
		{"an op more than the log", editImage(func(m map[string]any) {
			kept := m["kept"].([]any)
			last := kept[len(kept)-1].(map[string]any)
			last["p"], m["ops"] = last["p"].(float64)+1, m["ops"].(float64)+1
		})},
		{"an activation more than the log", editImage(func(m map[string]any) {
			m["acts"] = m["acts"].(float64) + 1
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			k := newKitchen(t, &host.Options{MaxWarm: -1})
			ri := k.run(fmt.Sprintf(`{"mode":"held-step","n":%d}`, steps))
			k.h.WaitSnapshots()
			k.h.Close(ctx)
			// The image is replaced by a batch of no events.
			rec, err := k.st.Run(ctx, ri.ID)
			if err != nil {
				t.Fatal(err)
			}
			img, err := k.st.State(ctx, ri.ID)
			if err != nil {
				t.Fatalf("a waiting run of %d steps has no state image: %v", steps, err)
			}
			bad := store.State{Seq: img.Seq, Data: tc.edit(t, img.Data)}
			if err := k.st.Append(ctx, ri.ID, rec.LastSeq, store.Batch{Run: &rec, PutState: &bad}); err != nil {
				t.Fatal(err)
			}
			k.restart()
			var answers []string
			for i := 0; ri.Status == store.StatusWaiting; i++ {
				answers = append(answers, fmt.Sprintf("a%d", i))
				if ri, err = k.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{Text: answers[i]}); err != nil {
					t.Fatal(err)
				}
			}
			got := result[struct {
				Sum     int      `json:"sum"`
				Answers []string `json:"answers"`
			}](t, ri)
			if got.Sum != steps*(steps-1)/2+1000 || mustJSON(t, got.Answers) != mustJSON(t, answers) {
				t.Fatalf("result %+v, answers %v", got, answers)
			}
			if st := k.h.SnapshotStats(); st.ImagesRefused != 1 || st.Images != 0 || st.Restored == 0 {
				t.Fatalf("stats %+v: want the bad image refused once, and the run's snapshots restored", st)
			}
		})
	}
}

// editImage returns an edit of a state image's JSON, its checksum made
// again, so that only the host's checks against the log can refuse it.
func editImage(f func(map[string]any)) func(t *testing.T, img []byte) []byte {
	return func(t *testing.T, img []byte) []byte {
		var m map[string]any
		if err := json.Unmarshal(img[:len(img)-4], &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
}
