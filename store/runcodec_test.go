package store

import (
	"encoding/json"
	"fmt"
	"github.com/sandflow/sandflow/abi/jsonwire"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// sameRun compares two decoded runs; times by instant, zone offset and
// whether they are UTC (each decode of an offset makes its own Location).
func sameRun(a, b Run) bool {
	sameTime := func(x, y time.Time) bool {
		_, ox := x.Zone()
		_, oy := y.Zone()
		return x.Equal(y) && ox == oy && (x.Location() == time.UTC) == (y.Location() == time.UTC)
	}
	if !sameTime(a.CreatedAt, b.CreatedAt) || !sameTime(a.UpdatedAt, b.UpdatedAt) ||
		string(a.Detail) != string(b.Detail) || (a.Detail == nil) != (b.Detail == nil) {
		return false
	}
	return a.ID == b.ID && a.Tool == b.Tool && a.Plugin == b.Plugin && a.Version == b.Version &&
		a.ModuleHash == b.ModuleHash && a.Status == b.Status && a.LastSeq == b.LastSeq
}

// checkRunDecode decodes v both ways: the same run, or an error both ways.
func checkRunDecode(t *testing.T, v []byte) bool {
	t.Helper()
	var fast, slow Run
	errFast := decodeRun(v, &fast)
	errSlow := json.Unmarshal(v, &slow)
	if (errFast == nil) != (errSlow == nil) || (errFast == nil && !sameRun(fast, slow)) {
		t.Fatalf("%q:\nfast %+v %v\njson %+v %v", v, fast, errFast, slow, errSlow)
	}
	// runLastSeq reads what encoding/json does, when it reads anything,
	// of any record encoding/json reads (the others it may read: Append
	// replaces them).
	if errSlow == nil {
		if last, ok := runLastSeq(v, slow.ID); ok && last != slow.LastSeq {
			t.Fatalf("%q: runLastSeq %d, encoding/json %d", v, last, slow.LastSeq)
		}
	}
	var r Run
	fast2 := decodeRunFast(v, &r)
	if w, _ := encodeRun(r); fast2 && string(w) == string(v) && jsonwire.PlainString(r.ID) {
		// It reads every record the store writes with a run id as run
		// ids are (plain).
		if last, ok := runLastSeq(v, r.ID); !ok || last != r.LastSeq {
			t.Fatalf("%q: runLastSeq %d, %v; want %d", v, last, ok, r.LastSeq)
		}
	}
	return fast2
}

// The store's hand reader of run records agrees with encoding/json on
// every input: records as the store writes them (which it takes), and
// ones it must leave to encoding/json (escapes, non-ASCII, other layouts,
// long numbers), their truncations and random changes.
func TestDecodeRunLikeJSON(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC)
	runs := []Run{
		{ID: "run_1", Tool: "deploy", Plugin: "deploy", Version: 3, ModuleHash: strings.Repeat("ab", 32), Status: StatusWaiting,
			CreatedAt: at, UpdatedAt: at.Add(time.Second), LastSeq: 1234, Detail: json.RawMessage(`{"waiting":{"mode":1,"futures":[12]}}`)},
		{ID: "run_2", Status: StatusCompleted, CreatedAt: at, UpdatedAt: at, LastSeq: 7, Detail: json.RawMessage(`{"result":"a\"b \u00e9"}`)},
		{ID: "run_3", Tool: "t3", Status: StatusRunning, CreatedAt: at.In(time.FixedZone("x", 7200)), UpdatedAt: time.Time{}},
		{},
		{ID: "run_5", Tool: "t<&>"}, // written with escapes
		{ID: "r\u00e9", Tool: "tab\there", Version: -5, LastSeq: 1<<63 + 5, Detail: json.RawMessage(`null`)},
		{ID: "run_4", Version: 1 << 62, LastSeq: 999999999999999999, Detail: json.RawMessage(`[1, 2]`)},
	}
	var seeds [][]byte
	var taken []int
	for i, r := range runs {
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, v)
		if checkRunDecode(t, v) {
			taken = append(taken, i)
		}
	}
	if fmt.Sprint(taken) != "[0 1 2 3 4 5 6]" {
		t.Errorf("the hand reader took stored records %v, want all", taken)
	}
	first := string(seeds[0])
	for _, s := range []string{
		strings.Replace(first, `"id":`, `"id" :`, 1),
		strings.Replace(first, `{"id":"run_1",`, `{"tool":"x","id":"run_1",`, 1),
		strings.Replace(first, `,"lastSeq":1234`, `,"lastSeq":1234,"extra":1`, 1),
		strings.Replace(first, `,"lastSeq":1234`, `,"lastSeq":01234`, 1),
		strings.Replace(first, `,"lastSeq":1234`, `,"lastSeq":1234.0`, 1),
		strings.Replace(first, `,"lastSeq":1234`, `,"lastSeq":-1`, 1),
		strings.Replace(first, `,"version":3`, `,"version":-0`, 1),
		strings.Replace(first, `"detail":{`, `"detail": {`, 1),
		strings.Replace(first, `}}}`, `}} }`, 1),
		strings.Replace(first, `}}}`, `}}}x`, 1),
		strings.Replace(first, `"detail":{"waiting"`, `"detail":{"waiting":1,"waiting"`, 1),
		strings.Replace(first, `.931291011Z`, `Z`, 1),
		strings.Replace(first, `2026-12-01T`, `2026-13-01T`, 1),
		strings.Replace(first, `"createdAt":"`, `"createdAt":null,"x":"`, 1),
		strings.Replace(first, `"status":"waiting"`, `"status":null`, 1),
		first + " ",
		" " + first,
	} {
		checkRunDecode(t, []byte(s))
	}
	damaged(seeds, func(b []byte) { checkRunDecode(t, b) })
}

// damaged calls check with every truncation of the seeds and with 20,000
// random changes of them.
func damaged(seeds [][]byte, check func([]byte)) {
	for _, s := range seeds {
		for n := range len(s) {
			check(s[:n])
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte(`{}[]":,0123456789-+.eE \tnulltruefalse\\uZT` + "\x00\xc3\xa9")
	for range 20000 {
		b := []byte(string(seeds[r.IntN(len(seeds))]))
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		check(b)
	}
}

func BenchmarkDecodeRun(b *testing.B) {
	at := time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC)
	v, err := json.Marshal(Run{ID: "run_0123456789abcdef", Tool: "workload", Plugin: "workload", Version: 1, ModuleHash: strings.Repeat("ab", 32),
		Status: StatusWaiting, CreatedAt: at, UpdatedAt: at, LastSeq: 1234, Detail: json.RawMessage(`{"waiting":{"mode":1,"futures":[12]}}`)})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, *Run) error
	}{{"store", decodeRun}, {"encoding-json", func(v []byte, r *Run) error { return json.Unmarshal(v, r) }}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				var r Run
				if err := c.decode(v, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The store's hand encoder of run records writes what json.Marshal
// writes, byte for byte, or fails where it fails; and it takes the
// records a waiting or completed run usually has.
func TestEncodeRunLikeJSON(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC)
	base := Run{ID: "run_1", Tool: "deploy", Plugin: "deploy", Version: 3, ModuleHash: strings.Repeat("ab", 32), Status: StatusWaiting,
		CreatedAt: at, UpdatedAt: at.Add(time.Second), LastSeq: 1234, Detail: json.RawMessage(`{"waiting":{"mode":1,"futures":[12]}}`)}
	with := func(f func(r *Run)) Run { r := base; f(&r); return r }
	cases := []struct {
		r    Run
		fast bool
	}{
		{base, true},
		{with(func(r *Run) { r.Detail = nil }), true},
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result":42}`); r.Status = StatusCompleted }), true},
		{with(func(r *Run) { r.Version, r.LastSeq = -7, 1<<64-1 }), true},
		{with(func(r *Run) { r.CreatedAt, r.UpdatedAt = time.Time{}, at.Truncate(time.Second) }), true},
		{with(func(r *Run) { r.Tool = "a<b" }), false},
		{with(func(r *Run) { r.ID = `q"uote` }), false},
		{with(func(r *Run) { r.Plugin = "tab\there" }), false},
		{with(func(r *Run) { r.ModuleHash = "é" }), false},
		{with(func(r *Run) { r.Status = "\x7f" }), false},
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result": 1}`) }), false},
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result":"a b"}`) }), true}, // a space in a string is kept
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result":"<&>"}`) }), false},
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result":"\u2028"}`) }), true}, // an escape already
		{with(func(r *Run) { r.Detail = json.RawMessage("{\"result\":\"\u2028\"}") }), false},
		{with(func(r *Run) { r.Detail = json.RawMessage(`{"result":`) }), false},
		{with(func(r *Run) { r.Detail = json.RawMessage(`1 2`) }), false},
		{with(func(r *Run) { r.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), false},
		{with(func(r *Run) { r.CreatedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }), false},
		{with(func(r *Run) { r.CreatedAt = at.In(time.FixedZone("", -(3*3600 + 30*60))) }), true},
	}
	for i, c := range cases {
		want, errWant := json.Marshal(c.r)
		got, err := encodeRun(c.r)
		if (err == nil) != (errWant == nil) || string(got) != string(want) {
			t.Errorf("case %d: encodeRun %s %v; json.Marshal %s %v", i, got, err, want, errWant)
		}
		// Every record json.Marshal writes is written by hand now; the
		// column says which the hand encoder took before it wrote escapes.
		if _, fast := encodeRunFast(c.r); fast != (errWant == nil) {
			t.Errorf("case %d: encoded by hand: %v, json.Marshal: %v", i, fast, errWant)
		}
		if errWant == nil {
			var back, ref Run
			if err := decodeRun(got, &back); err != nil || json.Unmarshal(want, &ref) != nil || !sameRun(back, ref) {
				t.Errorf("case %d: decodes back to %+v %v", i, back, err)
			}
		}
	}
}

// The hand encoders size their buffer once, for the longest numbers and
// times json.Marshal writes.
func TestEncodeFastAllocatesOnce(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.FixedZone("", -(3*3600+30*60)))
	r := Run{ID: "run_1", Tool: "deploy", Plugin: "deploy", Version: -1 << 63, ModuleHash: strings.Repeat("ab", 32),
		Status: StatusWaiting, CreatedAt: at, UpdatedAt: at, LastSeq: 1<<64 - 1, Detail: json.RawMessage(`{"a":1}`)}
	a := Ask{ID: "ask_1", RunID: "run_1", Tool: "deploy", Position: 1<<32 - 1, Request: json.RawMessage(`{"prompt":"x"}`), CreatedAt: at}
	if n := testing.AllocsPerRun(10, func() { encodeRunFast(r) }); n != 1 {
		t.Errorf("encodeRunFast: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(10, func() { encodeAskFast(a) }); n != 1 {
		t.Errorf("encodeAskFast: %v allocations, want 1", n)
	}
}
