package history

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// evKinds are the event kinds, for the fuzz tests to choose from.
var evKinds = []string{KindRunCreated, KindRunResumed, KindStepStarted, KindStepCompleted, KindStepFailed, KindTimerSet, KindTimerFired,
	KindAskOpened, KindAskSettled, KindHookCreated, KindHookNext, KindHookReceived, KindHookDisposed, KindProgress, KindOutput,
	KindRunCompleted, KindRunFailed, KindRunCancelled, KindRunUpgraded, KindOpRefused, KindWebhookResponded, KindAgentSent,
	KindAgentSettled, KindCallReceived, KindReceive, KindReplied, KindAbortRequested, KindSignal}

// evSeeds are event data as the host writes them, near misses, and the
// inputs hand-written codecs get wrong: -0, 1e400, big integers, invalid
// UTF-8, lone surrogates, U+2028, HTML characters, raw JSON with white
// space, duplicate keys, null for every field.
var evSeeds = []struct{ kind, data string }{
	{KindRunResumed, `{}`},
	{KindRunResumed, `{"activation":1}`},
	{KindRunResumed, `{"activation":2147483647}`},
	{KindStepStarted, `{"input":[1,"two",{"3":null}],"op":2,"name":"inc","attempt":1}`},
	{KindStepStarted, `{"op":2,"name":"inc","attempt":1}`},
	{KindStepStarted, `{"input":0,"op":4294967295,"name":"a b","attempt":3}`},
	{KindStepCompleted, `{"op":2,"attempt":1,"result":{"a":[true,false,null,-1.5e-3,"x"]}}`},
	{KindStepCompleted, `{"op":2,"attempt":1}`},
	{KindStepCompleted, `{"op":7,"attempt":2,"result":"\ud83d\ude00"}`},
	{KindRunResumed, ` {}`}, {KindRunResumed, `{"activation":1} `}, {KindRunResumed, `{"activation":01}`},
	{KindRunResumed, `{"activation":1,"activation":2}`}, {KindRunResumed, `{"op":1}`},
	{KindStepStarted, `{"op":2,"name":"inc","attempt":1,"retry":{"maxAttempts":3}}`},
	{KindStepStarted, `{"name":"inc","op":2,"attempt":1}`}, {KindStepStarted, `{"op":2,"name":"in\u0063","attempt":1}`},
	{KindStepStarted, `{"input":1 ,"op":2,"name":"inc","attempt":1}`}, {KindStepStarted, `{"input":,"op":2,"name":"inc","attempt":1}`},
	{KindStepCompleted, `{"op":2,"attempt":1,"result":1,"result":2}`}, {KindStepCompleted, `{"op":2,"attempt":-1}`},
	{KindStepCompleted, `{"op":4294967296,"attempt":1}`}, {KindStepCompleted, `{"op":2,"attempt":1,"result":[1,]}`},
	{KindStepFailed, `{"op":2,"attempt":1,"error":{"type":"Retryable","message":"m","retryable":true,"retryAfterMs":5,"details":{"a":1}},"retryAt":"2026-12-01T10:00:01.5Z"}`},
	{KindStepStarted, `{"input":{"n":-0,"big":123456789012345678901234567890,"f":1e400},"op":3,"kind":"step","name":"n\u00e4me <&>","attempt":2,"retry":{"maxAttempts":3,"initialBackoffMs":100,"maxBackoffMs":1000,"backoffFactor":1.5}}`},
	{KindStepStarted, `{"retry":{"backoffFactor":1e400}}`}, {KindStepStarted, `{"retry":{"backoffFactor":-0}}`},
	{KindStepStarted, `{"retry":{"maxAttempts":3},"retry":{"maxBackoffMs":9}}`}, {KindStepStarted, `{"retry":null}`},
	{KindTimerSet, `{"op":4,"kind":"sleep","fireAt":"2026-12-01T10:05:00+02:00"}`}, {KindTimerSet, `{"fireAt":"2026-12-01T10:05:00\u002b02:00"}`},
	{KindTimerSet, `{"op":5,"fireAt":"2026-12-01T10:00:00Z","immediate":true}`}, {KindTimerSet, `{"fireAt":null}`}, {KindTimerSet, `{"fireAt":1}`},
	{KindTimerSet, `{"fireAt":"2026-13-01T10:00:00Z"}`},
	{KindOutput, `{"stream":"stdout","data":"hello \u003cworld\u003e\n","produced":12,"step":2}`},
	{KindOutput, `{"stream":"stderr","data":"cut","produced":-9223372036854775808,"cut":true}`},
	{KindOutput, `{"data":"\ud800 lone \udc00\ud800 \ud83d\ude00 \u2028` + "\xff\xe2\x80\xa8" + `"}`},
	{KindOutput, "{\"data\":\"\xed\xa0\x80\"}"}, {KindOutput, `{"produced":1e3}`}, {KindOutput, `{"produced":9223372036854775808}`},
	{KindHookCreated, `{"op":8,"kind":"hook","token":"tok_1","metadata":{"m":1},"conflict":"","hook":1,"url":"http://h/hooks/tok_1"}`},
	{KindHookCreated, `{"op":9,"kind":"webhook","token":"tok_2","hook":2,"webhook":{"respondWith":{"status":202},"manual":true}}`},
	{KindHookReceived, `{"hook":1,"index":0,"payload":  { "p" : "\u00e9" }  }`},
	{KindProgress, `{"value":{"done":3,"of":10}}`}, {KindProgress, `{"value":null}`},
	{KindRunUpgraded, `{"version":4,"moduleHash":"cd34","fromVersion":3,"fromHash":"ab12cd"}`},
	{KindOpRefused, `{"op":12,"kind":"fetch","name":"f","status":3,"error":{"type":"Capability","message":"no"}}`},
	{KindOpRefused, `{"error":{"type":"a"},"error":{"message":"b"}}`}, {KindOpRefused, `{"error":null}`}, {KindOpRefused, `{"status":-1}`},
	{KindWebhookResponded, `{"hook":2,"index":0,"response":{"status":200,"body":"aGk=","bodyEncoding":"base64"}}`},
	{KindAgentSent, `{"op":13,"kind":"agent","name":"echo","agentRequest":{"message":"hi"}}`},
	{KindAgentSettled, `{"op":13,"agent":{"status":"completed","reply":"hello"}}`},
	{KindCallReceived, `{"callId":"call_1","input":{"q":1}}`}, {KindReplied, `{"op":16,"answered":2}`},
	{KindAbortRequested, `{"reason":"operator <asked>"}`}, {KindRunCancelled, `{"reason":"user","Reason":"x"}`},
	{KindAskOpened, `{"op":3,"askId":"ask_2345abcd","request":{"prompt":"Go on?","options":[{"id":"ok","label":"OK"}]}}`},
	{KindAskSettled, `{"op":3,"askId":"ask_x","answer":{"status":"answered","optionId":"ok","text":"fine"}}`},
	{KindAskSettled, `{"answer":{}}`},
	{KindAskSettled, `{"answer": { "text" : "a" , "status":"s", "text":"b" } , "request":1,"request":[2]}`},
	{KindAskSettled, `{"answer":{"status":"a"},"answer":{"text":"b"}}`}, {KindAskSettled, `{"answer":null}`},
	{KindAskSettled, `{"answer":{"status":1}}`}, {KindAskSettled, `{"answer":{"Status":"a"}}`}, {KindAskSettled, `{"answer":[]}`},
	{KindRunCreated, `{"tool":"greet","plugin":"greet","version":3,"moduleHash":"ab12","input":{"name":"w"},"seed":"00ff","noAsk":true,"serve":true,"sharedInit":true,"agents":[{"name":"echo","description":"answers at once"}],"url":"http://h/runs/run_1","baseUrl":"http://h"}`},
	{KindRunCreated, `{"agents":[],"sharedInit":false,"tool":"a","tool":"b"}`},
	{KindRunCreated, `{"agents":[{},{"description":"d","name":"n","name":"m"}], "serve" : false }`},
	{KindRunCreated, `{"agents":[null]}`}, {KindRunCreated, `{"agents":null}`}, {KindRunCreated, `{"agents":[{"name":1}]}`},
	{KindRunCreated, `{"agents":[{}],"agents":[]}`}, {KindRunCreated, `{"version":-0}`}, {KindRunCreated, `{"version":"1"}`},
	{KindRunCreated, `{"tool":null,"plugin":null,"version":null,"moduleHash":null,"input":null,"seed":null,"noAsk":null,"serve":null,"sharedInit":null,"agents":null,"url":null,"baseUrl":null}`},
	{KindStepFailed, `{"activation":null,"op":null,"kind":null,"name":null,"status":null,"attempt":null,"retry":null,"retryAt":null,"fireAt":null,"immediate":null,"askId":null,"request":null,"answer":null}`},
	{KindOutput, `{"token":null,"metadata":null,"conflict":null,"hook":null,"index":null,"payload":null,"callId":null,"answered":null,"value":null,"result":null,"error":null,"reason":null}`},
	{KindOutput, `{"stream":null,"data":null,"produced":null,"step":null,"cut":null,"fromVersion":null,"fromHash":null,"webhook":null,"agent":null,"response":null,"agentRequest":null}`},
	{KindOutput, `{"error":{"type":null,"message":null,"retryable":null,"retryAfterMs":null,"details":null}}`},
	{KindStepStarted, `{"retry":{"maxAttempts":null,"initialBackoffMs":null,"maxBackoffMs":null,"backoffFactor":null}}`},
	{KindAskSettled, `{"answer":{"status":null,"optionId":null,"text":null}}`},
	{KindRunCreated, `{"agents":[{"name":null,"description":null}]}`},
	{KindOutput, `{"\u0064ata":"x","op":1}`}, {KindOutput, `{"OP":1}`}, {KindOutput, `{"op":1,}`}, {KindOutput, `{"op":1}x`},
	{KindOutput, `{"op":1.0}`}, {KindOutput, `{"op":1e2}`}, {KindOutput, `{"op":-0}`}, {KindOutput, `{"op":"1"}`},
	{KindOutput, `{"input":tru}`}, {KindOutput, `{"input":--1}`}, {KindOutput, `{"input":"\x"}`}, {KindOutput, `[]`}, {KindOutput, `null`},
	{KindOutput, ``}, {KindOutput, `{`},
}

// checkDecode decodes data both ways: what the fast path takes,
// json.Unmarshal takes too and decodes the same; what it declines it
// leaves cleared; decodeEvDataInto agrees with json.Unmarshal either way;
// and the layout reader, where it reads, reads what the general one does.
// It reports whether the fast path took it.
func checkDecode(t *testing.T, kind string, data []byte) bool {
	t.Helper()
	var fast, ref Data
	ok, full := decodeEvFast(kind, data, &fast, map[string]string{})
	err := json.Unmarshal(data, &ref)
	if !ok {
		if !reflect.DeepEqual(fast, Data{}) {
			t.Fatalf("%s %q: declined, but set %+v", kind, data, fast)
		}
	} else {
		if err != nil {
			t.Fatalf("%s %q: taken by the fast path, refused by json.Unmarshal: %v", kind, data, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("%s %q:\nfast %+v\njson %+v", kind, data, fast, ref)
		}
		if !full {
			cleared := fast
			cleared.ClearHot()
			if !reflect.DeepEqual(cleared, Data{}) {
				t.Fatalf("%s %q: not full, but ClearHot leaves %+v", kind, data, cleared)
			}
		}
		var hot Data
		if !decodeHot(data, &hot, nil) || !reflect.DeepEqual(hot, ref) {
			t.Fatalf("%s %q: the general reader gives %+v", kind, data, hot)
		}
	}
	var into Data
	_, err2 := DecodeInto(&store.Event{Kind: kind, Data: data}, &into, nil)
	if (err2 == nil) != (err == nil) || err == nil && !reflect.DeepEqual(into, ref) {
		t.Fatalf("%s %q: decodeEvDataInto %+v, %v; json.Unmarshal %+v, %v", kind, data, into, err2, ref, err)
	}
	return ok
}

// TestDecodeEvDataLikeJSON: the fast path agrees with json.Unmarshal on
// the seeds, their truncations and random changes, and takes the data of
// the hot kinds as the host writes it.
func TestDecodeEvDataLikeJSON(t *testing.T) {
	for i, s := range evSeeds {
		took := checkDecode(t, s.kind, []byte(s.data))
		if i < 9 && !took {
			t.Errorf("%s %s: the host's own layout was declined", s.kind, s.data)
		}
		for n := range len(s.data) {
			checkDecode(t, s.kind, []byte(s.data[:n]))
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]":,0123456789-+.eE \tnulltruefalse\\u"aé` + "\x00\xff")
	for range 30000 {
		s := evSeeds[r.IntN(len(evSeeds))]
		b := []byte(s.data)
		for range 1 + r.IntN(3) {
			if len(b) == 0 {
				break
			}
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		checkDecode(t, s.kind, b)
	}
}

// TestDecodeLaid: the layout reader takes what the host's encoder writes
// for the kinds it reads.
func TestDecodeLaid(t *testing.T) {
	for i, d := range []Data{
		{Activation: 3}, {},
		{Input: []byte(`{"n":1}`), Op: 4, Name: "inc", Attempt: 1}, {Op: 4, Name: "in\"c\u00e9", Attempt: 2},
		{Op: 4, Attempt: 1, Result: []byte(`[1,2]`)}, {Op: 9, Attempt: 1},
	} {
		kind := []string{KindRunResumed, KindRunResumed, KindStepStarted, KindStepStarted, KindStepCompleted, KindStepCompleted}[i]
		b, ok := encodeHot(&d)
		var got Data
		if !ok || !decodeLaid(kind, b, &got, nil) || !reflect.DeepEqual(got, d) {
			t.Errorf("%s %s: the host's encoding is not read back: %+v", kind, b, got)
		}
		checkDecode(t, kind, b)
	}
}

func FuzzDecodeEvData(f *testing.F) {
	for _, s := range evSeeds {
		for k, kind := range evKinds {
			if kind == s.kind {
				f.Add(uint8(k), []byte(s.data))
			}
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, data []byte) { checkDecode(t, evKinds[int(k)%len(evKinds)], data) })
}

// TestDecodeGoldenHistories: every event of the golden histories decodes
// as json.Unmarshal decodes it.
func TestDecodeGoldenHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "histories", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden histories: %v", err)
	}
	files = append(files, codecFixturePath("history-v1.json"))
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := Read(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist.Events {
			checkDecode(t, e.Kind, e.Data)
		}
	}
}

// checkEncode encodes d both ways: what the fast path writes is
// json.Marshal's bytes; what it declines holds a payload it leaves to
// json.Marshal, or a value json.Marshal refuses. What it writes decodes
// back as json.Unmarshal decodes it.
func checkEncode(t *testing.T, d *Data) bool {
	t.Helper()
	want, err := json.Marshal(d)
	got, ok := encodeHot(d)
	if ok && (err != nil || string(got) != string(want)) {
		t.Fatalf("%+v: encodeHot wrote %s; json.Marshal %s, %v", *d, got, want, err)
	}
	if !ok && err == nil && d.Webhook == nil && d.Agent == nil && d.Response == nil && d.AgentRequest == nil {
		t.Fatalf("%+v: declined, json.Marshal writes %s", *d, want)
	}
	if ok {
		checkDecode(t, KindOutput, got)
	}
	return ok
}

// evFromSeed builds an Data from fuzzed values: the fields r chooses
// get s, raw, n and x, as their types allow.
func evFromSeed(r *rand.Rand, s string, raw []byte, n int64, x float64) Data {
	var d Data
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return s[:r.IntN(len(s)+1)]
	}
	rawv := func() json.RawMessage {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return json.RawMessage(`{"a":[1,"<b>"]}`)
		}
		return raw
	}
	num := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return int64(r.Uint32())
		}
		return n
	}
	when := func() *time.Time {
		if r.IntN(2) == 0 {
			return nil
		}
		t := time.Unix(n%(1<<40), n%1e9)
		if r.IntN(2) == 0 {
			t = t.In(time.FixedZone("z", int(n%100000)))
		}
		return &t
	}
	d.Tool, d.Plugin, d.Version, d.ModuleHash, d.Input, d.Seed = str(), str(), int(num()), str(), rawv(), str()
	d.NoAsk, d.Serve, d.SharedInit = r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0
	for range r.IntN(3) {
		d.Agents = append(d.Agents, abi.AgentInfo{Name: str(), Description: str()})
	}
	if r.IntN(8) == 0 {
		d.Agents = []abi.AgentInfo{}
	}
	d.URL, d.BaseURL, d.Activation, d.Op, d.Kind, d.Name = str(), str(), int(num()), uint32(num()), str(), str()
	d.Status, d.Attempt = uint32(num()), int(num())
	if r.IntN(2) == 0 {
		d.Retry = &abi.RetryPolicy{MaxAttempts: int(num()), InitialBackoffMs: num(), MaxBackoffMs: num(), BackoffFactor: x}
	}
	d.RetryAt, d.FireAt, d.Immediate = when(), when(), r.IntN(2) == 0
	d.AskID, d.Request = str(), rawv()
	if r.IntN(2) == 0 {
		d.Answer = &abi.AskAnswer{Status: str(), OptionID: str(), Text: str()}
	}
	d.Token, d.Metadata, d.Conflict, d.Hook, d.Index, d.Payload = str(), rawv(), str(), uint32(num()), int(num()), rawv()
	d.CallID, d.Answered, d.Value, d.Result = str(), int(num()), rawv(), rawv()
	if r.IntN(2) == 0 {
		d.Error = &abi.ErrorObject{Type: str(), Message: str(), Retryable: r.IntN(2) == 0, RetryAfterMs: num(), Details: rawv()}
	}
	d.Reason, d.Stream, d.Data, d.Produced, d.Step, d.Cut = str(), str(), str(), num(), uint32(num()), r.IntN(2) == 0
	d.FromVersion, d.FromHash = int(num()), str()
	switch r.IntN(12) {
	case 0:
		d.Webhook = &abi.WebhookSpec{Manual: true}
	case 1:
		d.Agent = &abi.AgentResult{Status: str()}
	}
	// Most events set a few fields: clear most of the others.
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		if r.IntN(4) != 0 {
			v.Field(i).SetZero()
		}
	}
	return d
}

var encodeSeeds = []struct {
	s   string
	raw string
	n   int64
	x   float64
}{
	{"plain", `1`, 1, 1.5}, {"<b>&amp;</b>", ` { "a" : [ 1 , -0 ] } `, -1, math.Copysign(0, -1)},
	{"\u2028\u2029 caf\u00e9", `1e400`, math.MaxInt64, 1e21}, {"\xff\xe2\x80 \xed\xa0\x80", `"\ud800"`, math.MinInt64, 1e-7},
	{"\"\\\x00\x1f\x7f", `123456789012345678901234567890`, 1 << 32, math.NaN()}, {"", ``, 0, math.Inf(1)},
	{"x", "\"\u2028<>&\"", 7, 3}, {"x", `{"a":1`, 7, 3}, {"x", "\"\xff\"", 7, 3}, {"x", `[1,2]]`, 7, 3},
}

// TestEncodeEvDataLikeJSON: encodeHot writes json.Marshal's bytes for
// every field of Data, and declines only what it leaves to json.Marshal.
func TestEncodeEvDataLikeJSON(t *testing.T) {
	for _, fx := range fixtureEvents {
		var d Data
		if err := json.Unmarshal([]byte(fx.data), &d); err != nil {
			t.Fatal(err)
		}
		took := checkEncode(t, &d)
		if want := d.Webhook == nil && d.Agent == nil && d.Response == nil && d.AgentRequest == nil; took != want {
			t.Errorf("%s %s: taken %v, want %v", fx.kind, fx.data, took, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	taken := 0
	for i := range 20000 {
		s := encodeSeeds[i%len(encodeSeeds)]
		d := evFromSeed(r, s.s, []byte(s.raw), s.n, s.x)
		if checkEncode(t, &d) {
			taken++
		}
	}
	if taken < 5000 {
		t.Errorf("the fast path took only %d of 20000 random events", taken)
	}
}

func FuzzEncodeEvData(f *testing.F) {
	for i, s := range encodeSeeds {
		f.Add(uint64(i), s.s, []byte(s.raw), s.n, s.x)
	}
	f.Fuzz(func(t *testing.T, seed uint64, s string, raw []byte, n int64, x float64) {
		r := rand.New(rand.NewPCG(seed, seed>>32))
		for range 8 {
			d := evFromSeed(r, s, raw, n, x)
			checkEncode(t, &d)
		}
	})
}

// checkDetail: the hand encoders of a run's detail and of an answer
// write json.Marshal's bytes.
func checkDetail(t *testing.T, d Detail, a *abi.AskAnswer) {
	t.Helper()
	want, err := json.Marshal(d)
	if err == nil {
		if got := EncodeDetail(d); string(got) != string(want) {
			t.Fatalf("%+v: detailJSON %s, json.Marshal %s", d, got, want)
		}
	}
	want, err = json.Marshal(a)
	if got := EncodeAnswer(a); err != nil || string(got) != string(want) {
		t.Fatalf("%+v: answerJSON %s, json.Marshal %s, %v", a, got, want, err)
	}
}

func detailFromSeed(r *rand.Rand, s string, raw []byte) (Detail, *abi.AskAnswer) {
	d := Detail{Stalled: s[:r.IntN(len(s)+1)]}
	if r.IntN(2) == 0 {
		d.Result = raw
	}
	switch r.IntN(4) {
	case 0:
		d.Waiting = &WaitSet{Mode: abi.AwaitMode(r.IntN(3)), Futures: []uint32{uint32(r.IntN(9)), 1<<32 - 1}}
	case 1:
		d.Waiting = &WaitSet{Mode: 1, Futures: []uint32{}}
	case 2:
		d.Waiting = &WaitSet{}
	}
	if r.IntN(4) == 0 {
		d.Error = &abi.ErrorObject{Type: "Fatal", Message: s, Details: raw}
	}
	var a *abi.AskAnswer
	if r.IntN(4) > 0 {
		a = &abi.AskAnswer{Status: s, OptionID: s[:r.IntN(len(s)+1)], Text: d.Stalled}
	}
	return d, a
}

func TestDetailJSONLikeMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for i := range 5000 {
		s := encodeSeeds[i%len(encodeSeeds)]
		d, a := detailFromSeed(r, s.s, []byte(s.raw))
		checkDetail(t, d, a)
	}
}

func FuzzDetailJSON(f *testing.F) {
	for i, s := range encodeSeeds {
		f.Add(uint64(i), s.s, []byte(s.raw))
	}
	f.Fuzz(func(t *testing.T, seed uint64, s string, raw []byte) {
		r := rand.New(rand.NewPCG(seed, 1))
		for range 4 {
			d, a := detailFromSeed(r, s, raw)
			checkDetail(t, d, a)
		}
	})
}

// BenchmarkDecodeHot decodes the event data of a long run of steps: a
// step_started, a step_completed and a run_resumed per step, through the
// general reader.
func BenchmarkDecodeHot(b *testing.B) {
	evs := stepEvents()
	var d Data
	strs := map[string]string{}
	for b.Loop() {
		for _, e := range evs {
			d.ClearHot()
			if !decodeHot(e.data, &d, strs) {
				b.Fatalf("%s: not taken", e.data)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// BenchmarkDecodeLaid is BenchmarkDecodeHot's events through decodeLaid
// first, as decodeEvDataInto reads them.
func BenchmarkDecodeLaid(b *testing.B) {
	evs := stepEvents()
	var d Data
	strs := map[string]string{}
	for b.Loop() {
		for _, e := range evs {
			d.ClearHot()
			if !decodeLaid(e.kind, e.data, &d, strs) {
				b.Fatalf("%s: not taken", e.data)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

type kindData struct {
	kind string
	data []byte
}

func stepEvents() []kindData {
	var evs []kindData
	for i := range 1000 {
		evs = append(evs,
			kindData{KindStepStarted, fmt.Appendf(nil, `{"input":%d,"op":%d,"name":"echo","attempt":1}`, i, i+1)},
			kindData{KindStepCompleted, fmt.Appendf(nil, `{"op":%d,"attempt":1,"result":%d}`, i+1, i)},
			kindData{KindRunResumed, fmt.Appendf(nil, `{"activation":%d}`, i+1)})
	}
	return evs
}

func BenchmarkEncodeEvent(b *testing.B) {
	d := Data{Op: 7, Kind: "ask", AskID: "ask_0123abcd", Request: json.RawMessage(`{"prompt":"Go on?","options":[{"id":"ok","label":"OK"}]}`)}
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
