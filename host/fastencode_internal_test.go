package host

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// checkEncodeHot encodes d both ways: when the fast path takes it, the
// bytes must be json.Marshal's. It reports whether the fast path took it.
func checkEncodeHot(t *testing.T, what string, d *evData) bool {
	t.Helper()
	want, err := json.Marshal(d)
	got, ok := encodeHot(d)
	if ok && (err != nil || string(got) != string(want)) {
		t.Fatalf("%s: encodeHot wrote %s; json.Marshal %s, %v", what, got, want, err)
	}
	// What the hand encoder writes, the hand decoder reads back as it was
	// (but a negative number, which it leaves to the general decoder).
	if ok && d.Activation >= 0 && d.Version >= 0 {
		var back evData
		taken := decodeHot(got, &back, nil)
		same := back.Tool == d.Tool && back.Plugin == d.Plugin && back.Version == d.Version &&
			back.ModuleHash == d.ModuleHash && back.Seed == d.Seed && back.NoAsk == d.NoAsk && back.Serve == d.Serve &&
			back.SharedInit == d.SharedInit && len(back.Agents) == len(d.Agents) && (len(d.Agents) == 0 || reflect.DeepEqual(back.Agents, d.Agents)) &&
			back.URL == d.URL && back.BaseURL == d.BaseURL &&
			back.Op == d.Op && back.Activation == d.Activation && back.Attempt == d.Attempt &&
			back.Kind == d.Kind && back.Name == d.Name && back.AskID == d.AskID &&
			bytes.Equal(back.Input, d.Input) && bytes.Equal(back.Request, d.Request) && bytes.Equal(back.Result, d.Result) &&
			reflect.DeepEqual(back.Answer, d.Answer)
		if !taken || !same {
			t.Fatalf("%s: decodeHot of %s: %+v, want %+v", what, got, back, *d)
		}
	}
	return ok
}

// hotEvents are the event data of the hot kinds as the host makes them.
func hotEvents() []evData {
	return []evData{
		{},
		{Activation: 3},
		{Op: 2, Kind: "step", Name: "inc", Input: json.RawMessage(`5`)},
		{Op: 2, Attempt: 1, Result: json.RawMessage(`{"a":[1,"b c",null]}`)},
		{Op: 7, Kind: "ask", AskID: "ask_0123abcd", Request: json.RawMessage(`{"prompt":"Go on?","options":[{"id":"ok","label":"OK"}]}`)},
		{Op: 7, AskID: "ask_0123abcd", Answer: &abi.AskAnswer{Status: "answered", OptionID: "ok"}},
		{Op: 7, AskID: "ask_0123abcd", Answer: &abi.AskAnswer{Status: "answered", Text: "yes, go on"}},
		{Op: 1<<32 - 1, Activation: -1, Attempt: 1<<31 - 1},
	}
}

// The hand encoder writes json.Marshal's bytes for every event of the hot
// kinds, and leaves alone any evData with a field it does not write: each
// of evData's fields is set in turn, so a field added to evData and not
// to onlyHot fails here.
func TestEncodeHotLikeJSON(t *testing.T) {
	for i, d := range hotEvents() {
		if !checkEncodeHot(t, "hot event", &d) {
			t.Errorf("hot event %d (%+v) was left to json.Marshal", i, d)
		}
	}
	base := hotEvents()[4]
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	samples := map[reflect.Type]any{
		reflect.TypeFor[string]():            "x",
		reflect.TypeFor[int]():               7,
		reflect.TypeFor[int64]():             int64(7),
		reflect.TypeFor[uint32]():            uint32(7),
		reflect.TypeFor[bool]():              true,
		reflect.TypeFor[json.RawMessage]():   json.RawMessage(`{"z":1}`),
		reflect.TypeFor[*time.Time]():        &at,
		reflect.TypeFor[*abi.AskAnswer]():    &abi.AskAnswer{Status: "cancelled"},
		reflect.TypeFor[*abi.RetryPolicy]():  &abi.RetryPolicy{MaxAttempts: 2},
		reflect.TypeFor[*abi.WebhookSpec]():  &abi.WebhookSpec{},
		reflect.TypeFor[*abi.AgentResult]():  &abi.AgentResult{Status: "completed"},
		reflect.TypeFor[*abi.HTTPResponse](): &abi.HTTPResponse{Status: 200},
		reflect.TypeFor[*abi.AgentRequest](): &abi.AgentRequest{Message: "m"},
		reflect.TypeFor[*abi.ErrorObject]():  &abi.ErrorObject{Message: "e"},
		reflect.TypeFor[[]AgentInfo]():       []AgentInfo{{Name: "a"}},
	}
	hot := map[string]bool{"Input": true, "Activation": true, "Op": true, "Kind": true, "Name": true,
		"Attempt": true, "AskID": true, "Request": true, "Answer": true, "Result": true,
		"Tool": true, "Plugin": true, "Version": true, "ModuleHash": true, "Seed": true, "NoAsk": true,
		"Serve": true, "SharedInit": true, "Agents": true, "URL": true, "BaseURL": true}
	typ := reflect.TypeFor[evData]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		s, ok := samples[f.Type]
		if !ok {
			t.Fatalf("evData.%s is a %s: add a sample value for it", f.Name, f.Type)
		}
		d := base
		reflect.ValueOf(&d).Elem().Field(i).Set(reflect.ValueOf(s))
		took := checkEncodeHot(t, "evData with "+f.Name, &d)
		if took != hot[f.Name] {
			t.Errorf("evData with %s set: taken by the fast path %v, want %v", f.Name, took, hot[f.Name])
		}
	}
	// Random values of the hot fields, with the characters json.Marshal
	// escapes or changes, and raw JSON with spaces and damage.
	r := rand.New(rand.NewPCG(3, 4))
	chars := []byte("ab <>&\"\\\x01\x7fé{}[]:,1")
	str := func() string {
		b := make([]byte, r.IntN(4))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
	raws := []string{``, `1`, `"a b"`, `{"a": 1}`, `[1,2]`, `"<"`, `{"a":`, `null`, ` 1`, `"\u00e9"`, "\"\u00e9\""}
	raw := func() json.RawMessage { return json.RawMessage(raws[r.IntN(len(raws))]) }
	taken, takenCreated := 0, 0
	for range 10000 {
		d := evData{Input: raw(), Activation: r.IntN(3) - 1, Op: uint32(r.IntN(3)), Kind: str(), Name: str(),
			Attempt: r.IntN(2), AskID: str(), Request: raw(), Result: raw()}
		if r.IntN(2) == 0 {
			d.Answer = &abi.AskAnswer{Status: str(), OptionID: str(), Text: str()}
		}
		if r.IntN(2) == 0 { // run_created's fields
			d = evData{Tool: str(), Plugin: str(), Version: r.IntN(3) - 1, ModuleHash: str(), Input: raw(), Seed: str(),
				NoAsk: r.IntN(2) == 0, Serve: r.IntN(2) == 0, SharedInit: r.IntN(2) == 0, URL: str(), BaseURL: str()}
			for range r.IntN(3) {
				d.Agents = append(d.Agents, AgentInfo{Name: str(), Description: str()})
			}
			if r.IntN(4) == 0 {
				d.Agents = []AgentInfo{}
			}
		}
		if checkEncodeHot(t, "random evData", &d) {
			taken++
			if d.Tool != "" || d.Seed != "" {
				takenCreated++
			}
		}
	}
	if taken < 50 || takenCreated < 10 {
		t.Errorf("the fast path took only %d of 10000 random events, %d of them run_created's", taken, takenCreated)
	}
}

func BenchmarkEncodeEvent(b *testing.B) {
	d := hotEvents()[4]
	b.Run("hot", func(b *testing.B) {
		for b.Loop() {
			if _, ok := encodeHot(&d); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(&d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The hand encoders of a run's detail and of an answer write
// json.Marshal's bytes for every value, and leave to it what they cannot.
func TestDetailJSONLikeMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	chars := []byte("ab <>&\"\\\x01é")
	str := func() string {
		b := make([]byte, r.IntN(4))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
	raws := []string{``, `1`, `{"greeting":"hello world"}`, `{"a": 1}`, `"<"`, `null`, `[1,2]`}
	for range 5000 {
		d := runDetail{Result: json.RawMessage(raws[r.IntN(len(raws))]), Stalled: str()}
		switch r.IntN(4) {
		case 0:
			d.Waiting = &waitSet{Mode: abi.AwaitMode(r.IntN(3)), Futures: []uint32{uint32(r.IntN(9)), 1<<32 - 1}}
		case 1:
			d.Waiting = &waitSet{Mode: 1, Futures: []uint32{}}
		case 2:
			d.Waiting = &waitSet{}
		}
		if r.IntN(8) == 0 {
			d.Error = &abi.ErrorObject{Type: "Fatal", Message: str()}
		}
		want, err := json.Marshal(d)
		if got := detailJSON(d); err != nil || string(got) != string(want) {
			t.Fatalf("%+v: detailJSON %s, json.Marshal %s, %v", d, got, want, err)
		}
		var a *abi.AskAnswer
		if r.IntN(4) > 0 {
			a = &abi.AskAnswer{Status: str(), OptionID: str(), Text: str()}
		}
		want, err = json.Marshal(a)
		if got := answerJSON(a); err != nil || string(got) != string(want) {
			t.Fatalf("%+v: answerJSON %s, json.Marshal %s, %v", a, got, want, err)
		}
	}
}
