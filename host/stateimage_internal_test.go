package host

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// synthLog makes a run's log of about n ops of the kinds a state image
// holds: steps (some retried, some failed, some left running), questions
// (answered at once, later, or left open), sleeps, agent turns, refusals,
// progress and output, over many activations. With hook set it also
// creates a hook, after which the run has no image.
func synthLog(seed uint64, n int, hook bool) (store.Run, []store.Event) {
	r := rand.New(rand.NewPCG(seed, 7))
	rec := store.Run{ID: fmt.Sprintf("synth-%d", seed), Tool: "t", Plugin: "p", Version: 1, ModuleHash: "h"}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	var evs []store.Event
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	push := func(kind string, d *history.Data) {
		e := history.NewEvent(kind, at(len(evs)), d)
		e.Seq = uint64(len(evs) + 1)
		evs = append(evs, e)
	}
	push(EvRunCreated, &history.Data{Tool: "t", Plugin: "p", Version: 1, ModuleHash: "h", Input: json.RawMessage(`{"n":1}`),
		Seed: strings.Repeat("ab", 32)})
	acts := 0
	push(EvRunResumed, &history.Data{Activation: acts})
	p := uint32(0)
	var open []uint32 // questions left open, answered in a later activation
	var sleeping []uint32
	for p < uint32(n) {
		switch k := r.IntN(20); {
		case k < 10:
			p++
			push(EvStepStarted, &history.Data{Op: p, Kind: "step", Name: "s", Input: json.RawMessage(fmt.Sprintf(`[%d]`, p)), Attempt: 1})
			switch r.IntN(8) {
			case 0: // retried
				ra := at(len(evs) + 50)
				push(EvStepFailed, &history.Data{Op: p, Attempt: 1, RetryAt: &ra, Error: &abi.ErrorObject{Message: "again"}})
				push(EvStepStarted, &history.Data{Op: p, Kind: "step", Name: "s", Attempt: 2})
				push(EvStepCompleted, &history.Data{Op: p, Attempt: 2, Result: json.RawMessage(`"late"`)})
			case 1:
				push(EvStepFailed, &history.Data{Op: p, Attempt: 1, Error: &abi.ErrorObject{Message: "no"}})
			case 2:
				if p > uint32(n)-5 { // left running at the end
					continue
				}
				fallthrough
			default:
				push(EvStepCompleted, &history.Data{Op: p, Attempt: 1, Result: json.RawMessage(fmt.Sprintf(`{"v":%d}`, p))})
			}
		case k < 13:
			p++
			id := fmt.Sprintf("ask-%d", p)
			if r.IntN(4) == 0 {
				push(EvAskOpened, &history.Data{Op: p, AskID: id, Request: json.RawMessage(`{"prompt":"now?"}`),
					Answer: &abi.AskAnswer{Status: abi.AnswerAnswered, Text: "at once"}})
			} else {
				push(EvAskOpened, &history.Data{Op: p, AskID: id, Request: json.RawMessage(`{"prompt":"later?"}`)})
				open = append(open, p)
			}
		case k < 14:
			p++
			fa := at(len(evs) + 1000)
			push(EvTimerSet, &history.Data{Op: p, FireAt: &fa})
			sleeping = append(sleeping, p)
		case k < 15:
			p++
			push(EvAgentSent, &history.Data{Op: p, Name: "helper", Input: json.RawMessage(`"do it"`)})
			if r.IntN(3) > 0 {
				push(EvAgentSettled, &history.Data{Op: p, Agent: &abi.AgentResult{Status: abi.AgentCompleted, Reply: "done"}})
			}
		case k < 16:
			p++
			push(EvOpRefused, &history.Data{Op: p, Kind: "step", Name: "bad", Status: uint32(abi.StatusBadRequest),
				Error: &abi.ErrorObject{Message: "refused"}})
		case k < 17:
			p++
			push(EvProgress, &history.Data{Op: p, Value: json.RawMessage(fmt.Sprintf(`{"at":%d}`, p))})
			push(EvOutput, &history.Data{Stream: "stdout", Data: "x", Produced: int64(p)})
		case k < 18 && hook && p > uint32(n/2):
			p++
			push(EvHookCreated, &history.Data{Op: p, Token: "tok"})
			hook = false
		default:
			// A new activation: some waits end before it.
			for len(open) > 0 && r.IntN(2) == 0 {
				q := open[0]
				open = open[1:]
				push(EvAskSettled, &history.Data{Op: q, AskID: fmt.Sprintf("ask-%d", q), Answer: &abi.AskAnswer{Status: abi.AnswerAnswered, Text: "later"}})
			}
			if len(sleeping) > 0 && r.IntN(2) == 0 {
				push(EvTimerFired, &history.Data{Op: sleeping[0]})
				sleeping = sleeping[1:]
			}
			acts++
			push(EvRunResumed, &history.Data{Activation: acts})
		}
	}
	rec.LastSeq = uint64(len(evs))
	rec.Status = store.StatusWaiting
	return rec, evs
}

// foldAll is the state of the whole of evs, folded from the start.
func foldAll(t *testing.T, rec store.Run, evs []store.Event) *state.Run {
	t.Helper()
	rs := state.New(rec)
	for _, e := range evs {
		if err := rs.Apply(e); err != nil {
			t.Fatalf("folding event %d (%s): %v", e.Seq, e.Kind, err)
		}
	}
	return rs
}

// stateDump is everything a state knows, in a form that compares times
// by instant: ops, markers, hooks, calls and counters.
func stateDump(rs *state.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id %s seq %d status %s result %s failure %v\n", rs.ID, rs.LastSeq, rs.Status, rs.Result, rs.Failure)
	fmt.Fprintf(&b, "start %s seed %x openAsks %d out %d/%d progress %s\n", rs.Start.UTC().Format(time.RFC3339Nano), rs.Seed, rs.OpenAsks, rs.OutProduced, rs.OutRecorded, rs.LastProgress)
	fmt.Fprintf(&b, "created %s\n", mustJSON(rs.Created))
	for i := range rs.MarkBase {
		fmt.Fprintf(&b, "marker %d: left out\n", i)
	}
	for i, m := range rs.Markers {
		fmt.Fprintf(&b, "marker %d: %d %s\n", rs.MarkBase+i, m.Seq, m.Time.UTC().Format(time.RFC3339Nano))
	}
	for i, o := range rs.Ops {
		fmt.Fprintf(&b, "op %d: %s\n", i+1, opDump(o))
	}
	fmt.Fprintf(&b, "hooks %d sessions %d calls %+v receives %v aborts %v\n", len(rs.Hooks), len(rs.Sessions), rs.Calls, rs.Receives, rs.Aborts)
	return b.String()
}

func opDump(o *state.Op) string {
	if o == nil {
		return "left out"
	}
	io := state.ToImageOp(0, o)
	for _, t := range []*time.Time{&io.T, &io.RetryAt, &io.FireAt} {
		*t = t.UTC()
	}
	return string(mustJSON(io))
}

// TestStateImages: for every prefix of synthetic logs (and of the golden
// histories) whose state has an image, the state loaded from that image
// with the rest of the log applied holds the same ops it keeps, markers
// and counters as the state folded from the start, says the same about
// the run (RunInfo), makes the same next image, and completes to exactly
// that state, keeping its op objects. A state with a hook has no image.
func TestStateImages(t *testing.T) {
	type logCase struct {
		name string
		rec  store.Run
		evs  []store.Event
	}
	var cases []logCase
	for seed := range uint64(6) {
		rec, evs := synthLog(seed, 40+int(seed)*30, seed%3 == 2)
		cases = append(cases, logCase{rec.ID, rec, evs})
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var hist History
		if json.Unmarshal(b, &hist) != nil {
			continue
		}
		if _, err := historyState(&hist); err != nil {
			continue // the bad histories
		}
		c := logCase{name: filepath.Base(f), rec: hist.Run}
		for _, he := range hist.Events {
			c.evs = append(c.evs, store.Event{Seq: he.Seq, Time: he.Time, Kind: he.Kind, Data: he.Data})
		}
		cases = append(cases, c)
	}
	imaged, hooked := 0, 0
	for _, c := range cases {
		full := foldAll(t, c.rec, c.evs)
		wantDump, wantInfo := stateDump(full), mustJSON((&Host{}).info(full))
		// inc grows one event at a time and makes an image at each
		// prefix, its scans starting where the last one allowed.
		inc := state.New(c.rec)
		for k := 1; k <= len(c.evs); k++ {
			if err := inc.Apply(c.evs[k-1]); err != nil {
				t.Fatal(err)
			}
			pre := foldAll(t, c.rec, c.evs[:k])
			img := pre.Image()
			if got := inc.Image(); string(got) != string(img) {
				t.Fatalf("%s at %d: the image made after earlier ones differs:\n %s\n %s", c.name, k, got, img)
			}
			if img == nil {
				if pre.Imageable() {
					t.Fatalf("%s at %d: imageable, but no image", c.name, k)
				}
				if len(pre.Hooks) > 0 {
					hooked++
				}
				continue
			}
			imaged++
			loads := 0
			lz, err := state.FromImage(c.rec, store.State{Seq: uint64(k), Data: img}, func(n int) ([]store.Event, error) {
				loads++
				return c.evs[:n], nil
			})
			if err != nil {
				t.Fatalf("%s at %d: %v", c.name, k, err)
			}
			for _, e := range c.evs[k:] {
				if err := lz.Apply(e); err != nil {
					t.Fatalf("%s at %d: applying event %d to the loaded state: %v", c.name, k, e.Seq, err)
				}
			}
			// What it kept is what the full state says, and it says the
			// same of the run without completing itself.
			if lz.LastSeq != full.LastSeq || len(lz.Ops) != len(full.Ops) || lz.Acts() != full.Acts() ||
				lz.OpenAsks != full.OpenAsks || lz.OutProduced != full.OutProduced || lz.OutRecorded != full.OutRecorded ||
				string(lz.LastProgress) != string(full.LastProgress) || lz.Status != full.Status {
				t.Fatalf("%s at %d: counters differ:\n loaded %s\n full   %s", c.name, k, stateDump(lz), wantDump)
			}
			for i, o := range lz.Ops {
				if o != nil && opDump(o) != opDump(full.Ops[i]) {
					t.Fatalf("%s at %d: op %d is %s, folded %s", c.name, k, i+1, opDump(o), opDump(full.Ops[i]))
				}
			}
			if last := lz.Acts() - 1; lz.Markers[len(lz.Markers)-1] != full.Markers[last] {
				t.Fatalf("%s at %d: last marker %+v, folded %+v", c.name, k, lz.Markers[len(lz.Markers)-1], full.Markers[last])
			}
			if got := mustJSON((&Host{}).info(lz)); string(got) != string(wantInfo) {
				t.Fatalf("%s at %d: info\n %s\nfolded\n %s", c.name, k, got, wantInfo)
			}
			if a, b := lz.Image(), full.Image(); string(a) != string(b) {
				t.Fatalf("%s at %d: the next image differs:\n %s\n %s", c.name, k, a, b)
			}
			if loads != 0 {
				t.Fatalf("%s at %d: the loaded state read the log %d times before it was asked for what it left out", c.name, k, loads)
			}
			kept := map[int]*state.Op{}
			for i, o := range lz.Ops {
				if o != nil {
					kept[i] = o
				}
			}
			var im state.Image
			if err := json.Unmarshal(img[:len(img)-4], &im); err != nil {
				t.Fatal(err)
			}
			if len(pre.Ops) > 20 && pre.Ops[0].Settled && pre.Ops[0].Refused == 0 && len(im.Kept) == len(pre.Ops) {
				t.Fatalf("%s at %d: the image kept all %d ops", c.name, k, len(pre.Ops))
			}
			if err := lz.Expand(); err != nil {
				t.Fatalf("%s at %d: expand: %v", c.name, k, err)
			}
			if loads != 1 || lz.Lazy != nil {
				t.Fatalf("%s at %d: expand read the log %d times, lazy %v", c.name, k, loads, lz.Lazy)
			}
			if got := stateDump(lz); got != wantDump {
				t.Fatalf("%s at %d: the completed state differs:\n%s\nfolded:\n%s", c.name, k, got, wantDump)
			}
			for i, o := range kept {
				if lz.Ops[i] != o {
					t.Fatalf("%s at %d: op %d is a new object after expand", c.name, k, i+1)
				}
			}
		}
	}
	if imaged < 100 || hooked == 0 {
		t.Fatalf("%d prefixes imaged, %d with hooks: the cases do not cover images", imaged, hooked)
	}
}

// TestStateImageLazyAccess: a loaded state completes itself when asked
// for an op or a marker it left out, once; a log that cannot be read
// leaves it lazy with the error, which op answers with nil.
func TestStateImageLazyAccess(t *testing.T) {
	rec, evs := synthLog(11, 200, false)
	full := foldAll(t, rec, evs)
	img := full.Image()
	if img == nil {
		t.Fatal("no image")
	}
	load := func(lz **state.Run, fail error) *int {
		n := 0
		var err error
		*lz, err = state.FromImage(rec, store.State{Seq: rec.LastSeq, Data: img}, func(k int) ([]store.Event, error) {
			n++
			if fail != nil {
				return nil, fail
			}
			return evs[:k], nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return &n
	}
	var lz *state.Run
	n := load(&lz, nil)
	left := -1
	for i, o := range lz.Ops {
		if o == nil {
			left = i
			break
		}
	}
	if left < 0 {
		t.Fatal("the image left no op out")
	}
	if o := lz.Op(uint32(left + 1)); o == nil || opDump(o) != opDump(full.Ops[left]) || *n != 1 {
		t.Fatalf("op %d of the loaded state: %s after %d loads, want %s", left+1, opDump(o), *n, opDump(full.Ops[left]))
	}
	_ = lz.Op(1)
	if *n != 1 {
		t.Fatalf("the log was read %d times", *n)
	}

	n = load(&lz, nil)
	if m := lz.Marker(0); m != full.Markers[0] || *n != 1 {
		t.Fatalf("marker 0: %+v after %d loads, want %+v", m, *n, full.Markers[0])
	}

	broken := errors.New("disk gone")
	n = load(&lz, broken)
	if o := lz.Op(uint32(left + 1)); o != nil {
		t.Fatalf("op %d with an unreadable log: %s", left+1, opDump(o))
	}
	if err := lz.LazyErr(); !errors.Is(err, broken) {
		t.Fatalf("lazyErr = %v, want it to wrap the read's error", err)
	}
	if _ = lz.Op(uint32(left + 1)); *n != 1 {
		t.Fatalf("a failed completion was tried %d times", *n)
	}

	// A log shorter than the image says: ErrBadHistory.
	_, err := state.FromImage(rec, store.State{Seq: rec.LastSeq, Data: img}, func(k int) ([]store.Event, error) { return evs[:k-1], nil })
	if err != nil {
		t.Fatal(err)
	}
	lz, _ = state.FromImage(rec, store.State{Seq: rec.LastSeq, Data: img}, func(k int) ([]store.Event, error) { return evs[:k-1], nil })
	if err := lz.Expand(); !errors.Is(err, ErrBadHistory) {
		t.Fatalf("expand over a short log: %v, want ErrBadHistory", err)
	}
}

// TestStateImageRefusals: images that are not of the run, not of its log
// or damaged are refused with an error, not loaded.
func TestStateImageRefusals(t *testing.T) {
	rec, evs := synthLog(3, 60, false)
	img := foldAll(t, rec, evs).Image()
	noLoad := func(int) ([]store.Event, error) { return nil, errors.New("not read") }
	var im state.Image
	if err := json.Unmarshal(img[:len(img)-4], &im); err != nil {
		t.Fatal(err)
	}
	// edit changes the image and makes its checksum again.
	edit := func(f func(*state.Image)) []byte {
		c := im
		c.Kept = append([]state.ImageOp(nil), im.Kept...)
		f(&c)
		b := mustJSON(&c)
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	flipped := bytes.Clone(img)
	flipped[len(flipped)/2] ^= 1
	other := rec
	other.ID = "other"
	for name, tc := range map[string]struct {
		rec  store.Run
		seq  uint64
		data []byte
	}{
		"another run":      {other, rec.LastSeq, img},
		"ahead of the log": {rec, rec.LastSeq + 1, edit(func(c *state.Image) { c.Seq = rec.LastSeq + 1 })},
		"seq mismatch":     {rec, rec.LastSeq - 1, img},
		"cut short":        {rec, rec.LastSeq, img[:len(img)/2]},
		"a flipped bit":    {rec, rec.LastSeq, flipped},
		"not json":         {rec, rec.LastSeq, binary.LittleEndian.AppendUint32([]byte("{not"), crc32.Checksum([]byte("{not"), castagnoli))},
		"last op left out": {rec, rec.LastSeq, edit(func(c *state.Image) { c.Kept = c.Kept[:len(c.Kept)-1] })},
		"format":           {rec, rec.LastSeq, edit(func(c *state.Image) { c.V = 99 })},
		"op order":         {rec, rec.LastSeq, edit(func(c *state.Image) { c.Kept[0].P, c.Kept[1].P = c.Kept[1].P, c.Kept[0].P })},
		"op past the end":  {rec, rec.LastSeq, edit(func(c *state.Image) { c.Kept[len(c.Kept)-1].P = uint32(c.Ops + 1) })},
		"no activation":    {rec, rec.LastSeq, edit(func(c *state.Image) { c.Acts = 0 })},
		"bad created":      {rec, rec.LastSeq, edit(func(c *state.Image) { c.Created = []byte(`{"seed":"xy"}`) })},
	} {
		if rs, err := state.FromImage(tc.rec, store.State{Seq: tc.seq, Data: tc.data}, noLoad); err == nil {
			t.Errorf("%s: loaded (%d ops)", name, len(rs.Ops))
		}
	}
}
