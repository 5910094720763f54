package store

import (
	"encoding/json"
	"testing"
	"time"
)

// recordSeeds are the values hand-written record codecs get wrong: -0,
// 1e400, big integers, invalid UTF-8, lone surrogates, U+2028, HTML
// characters, raw JSON with white space; the decode seeds add duplicate
// keys and null for every field.
var recordSeeds = []struct {
	s   string
	raw string
	n   int64
}{
	{"run_1", `{"waiting":{"mode":1,"futures":[12]}}`, 1234}, {"<b>&amp;</b>", ` { "a" : [ 1 , -0 ] } `, -1},
	{"\u2028\u2029 caf\u00e9", `1e400`, 1<<63 - 1}, {"\xff\xe2\x80 \xed\xa0\x80", `"\ud800"`, -1 << 63},
	{"\"\\\x00\x1f\x7f", `123456789012345678901234567890`, 1 << 32}, {"", ``, 0}, {"x", "\"\u2028<>&\"", 7},
	{"x", `{"a":1`, 7}, {"x", "\"\xff\"", 7}, {"x", `null`, 7},
}

var recordDecodeSeeds = []string{
	`{"id":"r","tool":"t","plugin":"p","version":1,"moduleHash":"h","status":"s","createdAt":"2026-12-01T00:00:00Z","updatedAt":"2026-12-01T00:00:00Z","lastSeq":1,"id":"q"}`,
	`{"id":null,"tool":null,"plugin":null,"version":null,"moduleHash":null,"status":null,"createdAt":null,"updatedAt":null,"lastSeq":null,"detail":null}`,
	`{"id":"\ud800","tool":"\u2028","plugin":"<&>","version":-0,"moduleHash":"` + "\xff" + `","status":"s","createdAt":"2026-12-01T00:00:00Z","updatedAt":"2026-12-01T00:00:00Z","lastSeq":18446744073709551616}`,
	`{"id":"a","runId":"r","tool":"t","position":1,"open":true,"request":{"p":1},"createdAt":"2026-12-01T00:00:00Z","open":false}`,
	`{"id":null,"runId":null,"tool":null,"position":null,"open":null,"request":null,"createdAt":null}`,
	`{"id":"a","runId":"r","tool":"t","position":-0,"open":true,"request": [ 1e400 ] ,"createdAt":"2026-12-01T00:00:00Z"}`,
}

func runFromSeed(s string, raw []byte, n int64, sec int64) Run {
	at := time.Unix(sec%(1<<40), sec%1e9).In(time.FixedZone("z", int(n%100000)))
	r := Run{ID: s, Tool: s + "t", Plugin: s, Version: int(n), ModuleHash: s, Status: RunStatus(s), CreatedAt: at, UpdatedAt: at.UTC(),
		LastSeq: uint64(n), Detail: raw}
	if len(raw) == 0 && n%2 == 0 {
		r.Detail = nil
	}
	return r
}

func askFromSeed(s string, raw []byte, n int64, sec int64) Ask {
	at := time.Unix(sec%(1<<40), sec%1e9).In(time.FixedZone("z", int(n%100000)))
	a := Ask{ID: s, RunID: s + "r", Tool: s, Position: uint32(n), Open: n%2 == 0, Request: raw, CreatedAt: at}
	if len(raw) == 0 && n%3 == 0 {
		a.Request = nil
	}
	return a
}

// FuzzRunRecord: the run record encoder writes json.Marshal's bytes (or
// fails where it fails), and the decoder reads any bytes as json.Unmarshal
// does (the same run, or an error both ways).
func FuzzRunRecord(f *testing.F) {
	for i, s := range recordSeeds {
		r := runFromSeed(s.s, []byte(s.raw), s.n, int64(i)*1e9)
		v, _ := json.Marshal(r)
		f.Add(s.s, []byte(s.raw), s.n, int64(i)*1e9, v)
	}
	for _, v := range recordDecodeSeeds {
		f.Add("", []byte(nil), int64(0), int64(0), []byte(v))
	}
	f.Fuzz(func(t *testing.T, s string, raw []byte, n, sec int64, v []byte) {
		r := runFromSeed(s, raw, n, sec)
		want, errWant := json.Marshal(r)
		got, err := encodeRun(r)
		if (err == nil) != (errWant == nil) || string(got) != string(want) {
			t.Fatalf("%+v: encodeRun %s %v; json.Marshal %s %v", r, got, err, want, errWant)
		}
		if err == nil {
			checkRunDecode(t, got)
		}
		checkRunDecode(t, v)
	})
}

// FuzzAskRecord is FuzzRunRecord for question records.
func FuzzAskRecord(f *testing.F) {
	for i, s := range recordSeeds {
		a := askFromSeed(s.s, []byte(s.raw), s.n, int64(i)*1e9)
		v, _ := json.Marshal(a)
		f.Add(s.s, []byte(s.raw), s.n, int64(i)*1e9, v)
	}
	for _, v := range recordDecodeSeeds {
		f.Add("", []byte(nil), int64(0), int64(0), []byte(v))
	}
	f.Fuzz(func(t *testing.T, s string, raw []byte, n, sec int64, v []byte) {
		a := askFromSeed(s, raw, n, sec)
		want, errWant := json.Marshal(a)
		got, err := encodeAsk(a)
		if (err == nil) != (errWant == nil) || string(got) != string(want) {
			t.Fatalf("%+v: encodeAsk %s %v; json.Marshal %s %v", a, got, err, want, errWant)
		}
		if err == nil {
			checkAskDecode(t, got)
		}
		checkAskDecode(t, v)
	})
}
