package history

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/jsonutil"
)

// checkAskFast decodes payload both ways: when the fast reader takes it,
// decodeStrict must accept it and make the same request. It reports
// whether the fast reader took it.
func checkAskFast(t *testing.T, payload []byte) bool {
	t.Helper()
	var fast, strict abi.AskRequest
	ok := DecodeAskRequest(payload, &fast)
	msg := jsonutil.DecodeStrict(payload, &strict)
	if ok && (msg != "" || !reflect.DeepEqual(fast, strict)) {
		t.Fatalf("%q:\nfast   %+v\nstrict %+v %s", payload, fast, strict, msg)
	}
	return ok
}

func askSamples() []abi.AskRequest {
	return []abi.AskRequest{
		{Prompt: "Go on?"},
		{Prompt: "Go on?", Options: []abi.AskOption{{ID: "ok", Label: "OK"}}},
		{Prompt: "Deploy to prod, then more?", Title: "t", Display: abi.DisplaySelect, AllowFreeform: true,
			Options: []abi.AskOption{{ID: "a", Label: "A", Description: "d", Style: abi.StyleDanger}, {ID: "b", Label: "B", Style: abi.StylePrimary}}},
		{Prompt: `say "hi"`},               // escaped
		{Prompt: "caf\u00e9", Title: "\t"}, // non-ASCII and a control
		{Prompt: ""},
		{Prompt: "a <b> & c \u2028"}, // escaped by json.Marshal for HTML and JavaScript
	}
}

// The hand reader and writer of questions agree with encoding/json: the
// payloads json.Marshal writes are read to the same request (and the
// plain ones by hand), near misses and random changes are read the same
// or left alone, and the writer writes json.Marshal's bytes.
func TestAskFastLikeJSON(t *testing.T) {
	var seeds [][]byte
	for i, req := range askSamples() {
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
		plain := true // json.Marshal's layout, whatever the strings
		if took := checkAskFast(t, b); took != plain {
			t.Errorf("sample %d (%s): taken by the fast reader %v, want %v", i, b, took, plain)
		}
		if got := EncodeAskRequest(req); string(got) != string(b) {
			t.Errorf("sample %d: encodeAskRequest wrote %s, json.Marshal %s", i, got, b)
		}
		if _, ok := abi.AppendAskRequestJSON(nil, req); ok != plain {
			t.Errorf("sample %d: AppendAskRequestJSON took it %v, want %v", i, ok, plain)
		}
	}
	first := string(seeds[2])
	for _, s := range []string{
		strings.Replace(first, `"title":"t"`, `"title":"t","title":"u"`, 1),
		strings.Replace(first, `"allowFreeform":true`, `"allowFreeform":false`, 1),
		strings.Replace(first, `"allowFreeform":true`, `"allowFreeform":true,"extra":1`, 1),
		strings.Replace(first, `"options":[`, `"options":[]`, 1),
		strings.Replace(first, `{"id":"a"`, `{"label":"A","id":"a"`, 1),
		strings.Replace(first, `"style":"danger"`, `"style":"danger","x":1`, 1),
		`{"prompt":"a","options":[]}`,
		`{"prompt":"a","display":null}`,
		`{"prompt":"a"} `,
		` {"prompt":"a"}`,
		`{"prompt":"a"}{}`,
		`{"title":"x","prompt":"a"}`,
	} {
		checkAskFast(t, []byte(s))
	}
	r := rand.New(rand.NewPCG(7, 8))
	// Random requests, with the characters json.Marshal escapes in any
	// field: the writer writes its bytes, and the reader reads them back.
	chars := []byte("ab <>&\"\\\x01\x7fé,:{}")
	str := func() string {
		b := make([]byte, r.IntN(3))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
	for range 5000 {
		req := abi.AskRequest{Prompt: str(), Title: str(), Display: str(), AllowFreeform: r.IntN(2) == 0}
		for range r.IntN(3) {
			req.Options = append(req.Options, abi.AskOption{ID: str(), Label: str(), Description: str(), Style: str()})
		}
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := EncodeAskRequest(req); string(got) != string(want) {
			t.Fatalf("%+v: encodeAskRequest wrote %s, json.Marshal %s", req, got, want)
		}
		checkAskFast(t, want)
	}
	alphabet := []byte(`{}[]":,abc \\tnulltrue` + "\x00\xc3\xa9")
	for range 20000 {
		b := []byte(string(seeds[r.IntN(len(seeds))]))
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		checkAskFast(t, b)
		for n := range len(b) {
			if r.IntN(16) == 0 {
				checkAskFast(t, b[:n])
			}
		}
	}
}

// FuzzAskRequest: questions with any strings are written as json.Marshal
// writes them and read back as decodeStrict reads them; any payload is
// read by the fast reader as decodeStrict reads it, or declined.
func FuzzAskRequest(f *testing.F) {
	for _, req := range askSamples() {
		b, err := json.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, req.Prompt, req.Title)
	}
	f.Add([]byte(`{"prompt":"\ud800","title":"\u2028<>&"}`), "\xff\xed\xa0\x80", "\u2028<&>")
	f.Add([]byte(`{"prompt":"a","prompt":"b"}`), "-0", "1e400")
	f.Add([]byte(`{"prompt":null,"title":null,"options":null}`), "", "")
	f.Fuzz(func(t *testing.T, payload []byte, s1, s2 string) {
		checkAskFast(t, payload)
		req := abi.AskRequest{Prompt: s1, Title: s2, Display: s1, AllowFreeform: len(s2)%2 == 0,
			Options: []abi.AskOption{{ID: s2, Label: s1, Description: s2, Style: s1}, {ID: s1}}}
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := EncodeAskRequest(req); string(got) != string(want) {
			t.Fatalf("%+v: encodeAskRequest wrote %s, json.Marshal %s", req, got, want)
		}
		if !checkAskFast(t, want) {
			t.Fatalf("%s: json.Marshal's layout declined", want)
		}
	})
}

// The hand reader of outcomes agrees with decodeStrict: on the payloads
// the SDK writes, near misses, their truncations and random changes.
func TestOutcomeFastLikeStrict(t *testing.T) {
	seeds := []string{
		`{"result":{"greeting":"hello world"}}`, `{"result":1}`, `{"result":null}`, `{"result":"s"}`,
		`{"result":[1,{"a":[]}]}`, `{"result":{"a":"x\"y"}}`, `{}`, `{"error":{"type":"Fatal","message":"m"}}`,
		`{"result":{"a":1},"error":{"type":"x"}}`, `{"result": 1}`, `{"result":1 }`, `{"result":"<"}`,
		`{"result":"é"}`, `{"result":1}x`, `{"result":1}}`, `{"result":}`, `{"result":{"a":1}`, `{"Result":1}`,
		`{"result":1,"extra":2}`, `{"result":tru}`, `{"result":01}`,
	}
	taken := 0
	check := func(p []byte) {
		var fast, strict abi.Outcome
		fmsg := DecodeOutcome(p, &fast)
		smsg := jsonutil.DecodeStrict(p, &strict)
		if fmsg != smsg || !reflect.DeepEqual(fast, strict) && !(len(fast.Result) == 0 && len(strict.Result) == 0 && reflect.DeepEqual(fast.Error, strict.Error)) {
			t.Fatalf("%q:\nfast   %+v %q\nstrict %+v %q", p, fast, fmsg, strict, smsg)
		}
		if fmsg == "" && len(p) > 10 && string(p[:10]) == `{"result":` && string(fast.Result) == string(p[10:len(p)-1]) {
			taken++
		}
	}
	for _, s := range seeds {
		check([]byte(s))
		for n := range len(s) {
			check([]byte(s[:n]))
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	alphabet := []byte(`{}[]":,0123456789-.e tnulresa\<é`)
	for range 20000 {
		b := []byte(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			if len(b) > 0 {
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			}
		}
		check(b)
	}
	if taken < 100 {
		t.Errorf("only %d outcomes read whole", taken)
	}
}
