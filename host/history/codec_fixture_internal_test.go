package history

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/internal/jsonutil"
	"github.com/sandflow/sandflow/store"
)

// The codec fixtures are event data as the host wrote it before its JSON
// codecs became one (testdata/codec/history-v1.json, a history file with
// every event kind, plain and with strings and raw JSON that need
// escaping), and what the decoder of that time made of each event
// (history-v1.decoded.json: json.Marshal of the decoded Data). The
// fixtures were written once with -update-codec-fixtures by the code of
// that time; the test holds today's decoder to the same values, so stored
// histories of that version still read.
var updateCodecFixtures = flag.Bool("update-codec-fixtures", false, "rewrite testdata/codec from the current event codec")

// fixtureEvents is the data of every event kind, as JSON the generator
// decodes into an Data and then encodes with NewEvent.
var fixtureEvents = []struct{ kind, data string }{
	{KindRunCreated, `{"tool":"deploy","plugin":"deploy","version":3,"moduleHash":"ab12cd","input":{"service":"api"},"seed":"00ff","noAsk":true,"serve":true,"sharedInit":true,"agents":[{"name":"echo","description":"answers at once"}],"url":"http://h/runs/run_1","baseUrl":"http://h"}`},
	{KindRunCreated, `{"tool":"t","plugin":"p","version":1,"moduleHash":"ff","input":{"html":"<a href=\"x\">&amp;</a>","sep":"\u2028\u2029","e":"caf\u00e9","ctl":"\u0001\t"},"seed":"01"}`},
	{KindRunResumed, `{}`},
	{KindRunResumed, `{"activation":7}`},
	{KindStepStarted, `{"input":[1,"two",{"3":null}],"op":2,"name":"inc","attempt":1}`},
	{KindStepStarted, `{"input":{"n":-0,"big":123456789012345678901234567890,"f":1e400},"op":3,"kind":"step","name":"n\u00e4me <&>","attempt":2,"retry":{"maxAttempts":3,"initialBackoffMs":100,"maxBackoffMs":1000,"backoffFactor":1.5}}`},
	{KindStepCompleted, `{"op":2,"attempt":1,"result":{"a":[true,false,null,-1.5e-3,"x\u00e9\n"]}}`},
	{KindStepCompleted, `{"op":2,"attempt":1}`},
	{KindStepFailed, `{"op":3,"attempt":1,"error":{"type":"Retryable","message":"boom \"quoted\"","retryable":true},"retryAt":"2026-12-01T10:00:01.5Z"}`},
	{KindTimerSet, `{"op":4,"kind":"sleep","fireAt":"2026-12-01T10:05:00+02:00"}`},
	{KindTimerSet, `{"op":5,"kind":"sleep","fireAt":"2026-12-01T10:00:00Z","immediate":true}`},
	{KindTimerFired, `{"op":4}`},
	{KindAskOpened, `{"op":6,"kind":"ask","askId":"ask_2345abcd","request":{"prompt":"Go on?","options":[{"id":"ok","label":"OK"}]}}`},
	{KindAskOpened, `{"op":7,"kind":"ask","askId":"ask_x","request":{"prompt":"Deploy <prod> & more?","title":"caf\u00e9"}}`},
	{KindAskSettled, `{"op":6,"askId":"ask_2345abcd","answer":{"status":"answered","optionId":"ok","text":"fine"}}`},
	{KindAskSettled, `{"op":7,"askId":"ask_x","answer":{"status":"answered","text":"line\nbreak <b>"}}`},
	{KindHookCreated, `{"op":8,"kind":"hook","token":"tok_1","metadata":{"m":1},"conflict":"","hook":1,"url":"http://h/hooks/tok_1"}`},
	{KindHookCreated, `{"op":9,"kind":"webhook","token":"tok_2","hook":2,"webhook":{"respondWith":{"status":202,"headers":{"X-A":"b"},"body":"ok"},"manual":true}}`},
	{KindHookNext, `{"op":10,"hook":1}`},
	{KindHookReceived, `{"hook":1,"index":0,"payload":{"p":"\u00e9"}}`},
	{KindHookDisposed, `{"op":11,"hook":1}`},
	{KindProgress, `{"value":{"done":3,"of":10}}`},
	{KindOutput, `{"stream":"stdout","data":"hello \u003cworld\u003e\n","produced":12,"step":2}`},
	{KindOutput, `{"stream":"stderr","data":"cut","produced":1048576,"cut":true}`},
	{KindRunUpgraded, `{"version":4,"moduleHash":"cd34","fromVersion":3,"fromHash":"ab12cd"}`},
	{KindOpRefused, `{"op":12,"kind":"fetch","name":"f","status":3,"error":{"type":"Capability","message":"no"}}`},
	{KindWebhookResponded, `{"hook":2,"index":0,"response":{"status":200,"body":"aGk=","bodyEncoding":"base64"}}`},
	{KindAgentSent, `{"op":13,"kind":"agent","name":"echo","agentRequest":{"message":"hi","session":"s1","outputSchema":{"type":"object"}}}`},
	{KindAgentSettled, `{"op":13,"agent":{"status":"completed","reply":"hello","data":{"x":1},"sessionEnded":true}}`},
	{KindAgentSettled, `{"op":14,"agent":{"status":"failed","error":{"code":"timeout","message":"slow"}}}`},
	{KindCallReceived, `{"callId":"call_1","input":{"q":1}}`},
	{KindReceive, `{"op":15}`},
	{KindReplied, `{"op":16,"answered":2}`},
	{KindAbortRequested, `{"reason":"operator <asked>"}`},
	{KindSignal, `{"op":17}`},
	{KindRunCompleted, `{"result":{"ok":true,"s":"\u2028"}}`},
	{KindRunFailed, `{"error":{"type":"Fatal","message":"bad","details":{"a":[1,2]}}}`},
	{KindRunCancelled, `{"reason":"user"}`},
}

func codecFixturePath(name string) string { return filepath.Join("testdata", "codec", name) }

// TestWriteCodecFixtures writes the fixtures, with -update-codec-fixtures.
func TestWriteCodecFixtures(t *testing.T) {
	if !*updateCodecFixtures {
		return
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	hist := File{Format: Format, Version: 1, Run: store.Run{ID: "run_codecfixture1", Tool: "deploy", Plugin: "deploy",
		Version: 3, ModuleHash: "ab12cd", Status: store.StatusCompleted, CreatedAt: at, UpdatedAt: at, LastSeq: uint64(len(fixtureEvents))}}
	var decoded []json.RawMessage
	for i, fe := range fixtureEvents {
		var d Data
		if err := json.Unmarshal([]byte(fe.data), &d); err != nil {
			t.Fatalf("%s %s: %v", fe.kind, fe.data, err)
		}
		e := NewEvent(fe.kind, at.Add(time.Duration(i)*time.Millisecond), &d)
		e.Seq = uint64(i + 1)
		hist.Events = append(hist.Events, Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Data: e.Data})
		back, err := Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		decoded = append(decoded, jsonutil.Must(back))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(hist); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(codecFixturePath("x")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(codecFixturePath("history-v1.json"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(decoded, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(codecFixturePath("history-v1.decoded.json"), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCodecFixturesDecode: the events of a history written before the
// codecs became one decode to the values the decoder of that time made of
// them, through the store's form (the compact data ReadHistory makes) and
// through every path decodeEvDataInto takes.
func TestCodecFixturesDecode(t *testing.T) {
	f, err := os.Open(codecFixturePath("history-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hist, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(codecFixturePath("history-v1.decoded.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want []json.RawMessage
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(hist.Events) {
		t.Fatalf("%d events, %d decoded values", len(hist.Events), len(want))
	}
	kinds := map[string]bool{}
	for i, he := range hist.Events {
		kinds[he.Kind] = true
		e := store.Event{Seq: he.Seq, Time: he.Time, Kind: he.Kind, Data: he.Data}
		d, err := Decode(e)
		if err != nil {
			t.Fatalf("event %d (%s): %v", e.Seq, e.Kind, err)
		}
		var w bytes.Buffer
		if err := json.Compact(&w, want[i]); err != nil {
			t.Fatal(err)
		}
		if got := jsonutil.Must(d); !bytes.Equal(got, w.Bytes()) {
			t.Errorf("event %d (%s) %s:\ndecoded %s\nwant    %s", e.Seq, e.Kind, e.Data, got, w.Bytes())
		}
	}
	for _, fe := range fixtureEvents {
		if !kinds[fe.kind] {
			t.Errorf("no %s event in the fixture", fe.kind)
		}
	}
}
