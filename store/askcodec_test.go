package store

import (
	"encoding/json"
	"fmt"
	"github.com/sandflow/sandflow/abi/jsonwire"
	"strings"
	"testing"
	"time"
)

func sameAsk(a, b Ask) bool {
	_, oa := a.CreatedAt.Zone()
	_, ob := b.CreatedAt.Zone()
	return a.ID == b.ID && a.RunID == b.RunID && a.Tool == b.Tool && a.Position == b.Position && a.Open == b.Open &&
		string(a.Request) == string(b.Request) && (a.Request == nil) == (b.Request == nil) &&
		a.CreatedAt.Equal(b.CreatedAt) && oa == ob && (a.CreatedAt.Location() == time.UTC) == (b.CreatedAt.Location() == time.UTC)
}

// checkAskDecode decodes v both ways: the same question, or an error both
// ways; it reports whether the hand reader took it.
func checkAskDecode(t *testing.T, v []byte) bool {
	t.Helper()
	var fast, slow Ask
	errFast := decodeAsk(v, &fast)
	errSlow := json.Unmarshal(v, &slow)
	if (errFast == nil) != (errSlow == nil) || (errFast == nil && !sameAsk(fast, slow)) {
		t.Fatalf("%q:\nfast %+v %v\njson %+v %v", v, fast, errFast, slow, errSlow)
	}
	// askOfRun agrees with encoding/json on the record's id and run,
	// where it decides (it reads nothing else: the write replaces it).
	if errSlow == nil && askOfRun(v, slow.ID, slow.RunID+"x") {
		t.Fatalf("%q: askOfRun takes run %sx for %s", v, slow.RunID, slow.RunID)
	}
	var a Ask
	fast2 := decodeAskFast(v, &a)
	if w, _ := encodeAsk(a); fast2 && string(w) == string(v) && jsonwire.PlainString(a.ID) && jsonwire.PlainString(a.RunID) && !askOfRun(v, a.ID, a.RunID) {
		t.Fatalf("%q: askOfRun does not take run %s of a record the store writes", v, a.RunID)
	}
	return fast2
}

var askAt = time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC)

var askBase = Ask{ID: "ask_0123abcd", RunID: "run_1", Tool: "workload", Position: 12, Open: true,
	Request: json.RawMessage(`{"prompt":"Go on?","display":"confirmation","options":[{"id":"ok","label":"OK"}]}`), CreatedAt: askAt}

// The hand reader of question records agrees with encoding/json on every
// input: records as the store writes them, ones it must leave to
// encoding/json, their truncations and random changes.
func TestDecodeAskLikeJSON(t *testing.T) {
	with := func(f func(a *Ask)) Ask { a := askBase; f(&a); return a }
	asks := []Ask{
		askBase,
		with(func(a *Ask) { a.Open, a.Position, a.Tool = false, 0, "" }),
		with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt":"x\",\"createdAt\":\"y"}`) }),
		with(func(a *Ask) { a.CreatedAt = askAt.In(time.FixedZone("x", -3600)) }),
		with(func(a *Ask) { a.Request = json.RawMessage(`null`) }),
		with(func(a *Ask) { a.Request = nil }),        // null too
		with(func(a *Ask) { a.ID = "ask_é" }),         // not plain ASCII
		with(func(a *Ask) { a.RunID = "a<b" }),        // escaped
		with(func(a *Ask) { a.Position = 1<<32 - 1 }), // taken: the largest
	}
	var seeds [][]byte
	var taken []int
	for i, a := range asks {
		v, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, v)
		if checkAskDecode(t, v) {
			taken = append(taken, i)
		}
	}
	if fmt.Sprint(taken) != "[0 1 2 3 4 5 6 7 8]" {
		t.Errorf("the hand reader took stored records %v, want all", taken)
	}
	first := string(seeds[0])
	for _, s := range []string{
		strings.Replace(first, `"id":`, `"id" :`, 1),
		strings.Replace(first, `"position":12`, `"position":4294967296`, 1),
		strings.Replace(first, `"position":12`, `"position":012`, 1),
		strings.Replace(first, `"position":12`, `"position":-1`, 1),
		strings.Replace(first, `"open":true`, `"open":null`, 1),
		strings.Replace(first, `"request":{`, `"request": {`, 1),
		strings.Replace(first, `}]},"createdAt"`, `}]} ,"createdAt"`, 1),
		strings.Replace(first, `}]},"createdAt"`, `}]},"x":1,"createdAt"`, 1),
		strings.Replace(first, `}]},"createdAt"`, `}]}},"createdAt"`, 1),
		strings.Replace(first, `Z"}`, `Z","id":"other"}`, 1),
		strings.Replace(first, `.931291011Z`, `Z`, 1),
		strings.Replace(first, `2026-12-01T`, `2026-13-01T`, 1),
		first + " ",
		" " + first,
	} {
		checkAskDecode(t, []byte(s))
	}
	damaged(seeds, func(b []byte) { checkAskDecode(t, b) })
}

// The hand encoder writes what json.Marshal writes, byte for byte, and
// takes the records questions usually have.
func TestEncodeAskLikeJSON(t *testing.T) {
	with := func(f func(a *Ask)) Ask { a := askBase; f(&a); return a }
	cases := []struct {
		a    Ask
		fast bool
	}{
		{askBase, true},
		{with(func(a *Ask) { a.Open, a.Position = false, 1<<32-1 }), true},
		{with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt":"a \u003c b"}`) }), true},
		{with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt":"a < b"}`) }), false},
		{with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt": "x"}`) }), false},
		{with(func(a *Ask) { a.Request = json.RawMessage("{\"prompt\":\"\u00e9\"}") }), false},
		{with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt":`) }), false},
		{with(func(a *Ask) { a.Request = nil }), false},
		{with(func(a *Ask) { a.Tool = `q"uote` }), false},
		{with(func(a *Ask) { a.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), false},
		{with(func(a *Ask) { a.CreatedAt = time.Date(2026, 12, 2, 1, 2, 3, 4, time.FixedZone("", 5*3600+45*60)) }), true},
		{with(func(a *Ask) { a.CreatedAt = time.Time{} }), true},
	}
	for i, c := range cases {
		want, errWant := json.Marshal(c.a)
		got, err := encodeAsk(c.a)
		if (err == nil) != (errWant == nil) || string(got) != string(want) {
			t.Errorf("case %d: encodeAsk %s %v; json.Marshal %s %v", i, got, err, want, errWant)
		}
		// Every record json.Marshal writes is written by hand now; the
		// column says which the hand encoder took before it wrote escapes.
		if _, fast := encodeAskFast(c.a); fast != (errWant == nil) {
			t.Errorf("case %d: encoded by hand: %v, json.Marshal: %v", i, fast, errWant)
		}
		if errWant == nil {
			var back, ref Ask
			if err := decodeAsk(got, &back); err != nil || json.Unmarshal(want, &ref) != nil || !sameAsk(back, ref) {
				t.Errorf("case %d: decodes back to %+v %v", i, back, err)
			}
		}
	}
}

func BenchmarkDecodeAsk(b *testing.B) {
	v, err := json.Marshal(askBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, *Ask) error
	}{{"store", decodeAsk}, {"encoding-json", func(v []byte, a *Ask) error { return json.Unmarshal(v, a) }}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				var a Ask
				if err := c.decode(v, &a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
