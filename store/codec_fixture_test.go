package store

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The codec fixtures are run and question records as the store wrote
// them before its JSON codecs became one (testdata/codec/records-v1.json),
// each with what the decoder of that time made of it. They were written
// once with -update-codec-fixtures by the code of that time; the test
// holds today's decoders to the same values, so stored records of that
// version still read.
var updateCodecFixtures = flag.Bool("update-codec-fixtures", false, "rewrite testdata/codec from the current record codecs")

type codecFixture struct {
	Runs []recordFixture `json:"runs"`
	Asks []recordFixture `json:"asks"`
}

// recordFixture is a stored record (valid UTF-8, as json.Marshal writes
// it, so a JSON string holds it byte for byte) and the
// decoded value, as json.Marshal wrote it, with the zone offsets of its
// times, which json.Marshal keeps but not whether a zero offset is UTC.
type recordFixture struct {
	Stored  string          `json:"stored"`
	Decoded json.RawMessage `json:"decoded"`
}

func fixtureRuns() []Run {
	at := time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC)
	return []Run{
		{ID: "run_1", Tool: "deploy", Plugin: "deploy", Version: 3, ModuleHash: strings.Repeat("ab", 32), Status: StatusWaiting,
			CreatedAt: at, UpdatedAt: at.Add(time.Second), LastSeq: 1234, Detail: json.RawMessage(`{"waiting":{"mode":1,"futures":[12]}}`)},
		{ID: "run_2", Status: StatusCompleted, CreatedAt: at, UpdatedAt: at, LastSeq: 7, Detail: json.RawMessage(`{"result":"a\"b \u00e9"}`)},
		{ID: "run_3", Tool: "t3", Status: StatusRunning, CreatedAt: at.In(time.FixedZone("x", 7200)), UpdatedAt: time.Time{}},
		{},
		{ID: "run_5", Tool: "t<&>", Plugin: "caf\u00e9", ModuleHash: "\u2028", Status: StatusFailed,
			Detail: json.RawMessage(`{"error":{"type":"Fatal","message":"<b> & \u2028"}, "result" : [ 1 , -0, 1e400, 123456789012345678901234567890 ]}`)},
		{ID: "run_6", Tool: "tab\there", Version: -5, LastSeq: 1<<63 + 5, Detail: json.RawMessage(`null`)},
		{ID: "run_7", Version: 1 << 62, LastSeq: 999999999999999999, Detail: json.RawMessage(`"\ud800 lone"`)},
	}
}

func fixtureAsks() []Ask {
	with := func(f func(a *Ask)) Ask { a := askBase; f(&a); return a }
	return []Ask{
		askBase,
		with(func(a *Ask) { a.Open, a.Position, a.Tool = false, 0, "" }),
		with(func(a *Ask) { a.Request = json.RawMessage(`{"prompt":"x\",\"createdAt\":\"y"}`) }),
		with(func(a *Ask) { a.CreatedAt = askAt.In(time.FixedZone("x", -3600)) }),
		with(func(a *Ask) { a.Request = json.RawMessage(`null`) }),
		with(func(a *Ask) { a.Request = nil }),
		with(func(a *Ask) { a.ID, a.RunID, a.Tool = "ask_\u00e9", "a<b", "\x01" }),
		with(func(a *Ask) { a.Request = json.RawMessage(` {"prompt" : "<go> & \u2028", "options":[]} `) }),
		with(func(a *Ask) { a.Position = 1<<32 - 1 }),
	}
}

func codecFixturePath() string { return filepath.Join("testdata", "codec", "records-v1.json") }

// TestWriteCodecFixtures writes the fixtures, with -update-codec-fixtures.
func TestWriteCodecFixtures(t *testing.T) {
	if !*updateCodecFixtures {
		return
	}
	var fx codecFixture
	for _, r := range fixtureRuns() {
		v, err := encodeRun(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Run
		if err := decodeRun(v, &back); err != nil {
			t.Fatal(err)
		}
		d, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		fx.Runs = append(fx.Runs, recordFixture{Stored: string(v), Decoded: d})
	}
	for _, a := range fixtureAsks() {
		v, err := encodeAsk(a)
		if err != nil {
			t.Fatal(err)
		}
		var back Ask
		if err := decodeAsk(v, &back); err != nil {
			t.Fatal(err)
		}
		d, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		fx.Asks = append(fx.Asks, recordFixture{Stored: string(v), Decoded: d})
	}
	out, err := json.MarshalIndent(fx, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(codecFixturePath()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(codecFixturePath(), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCodecFixturesDecode: records written before the codecs became one
// decode to the values the decoder of that time made of them, and today's
// encoders write them back byte for byte.
func TestCodecFixturesDecode(t *testing.T) {
	raw, err := os.ReadFile(codecFixturePath())
	if err != nil {
		t.Fatal(err)
	}
	var fx codecFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Runs) != len(fixtureRuns()) || len(fx.Asks) != len(fixtureAsks()) {
		t.Fatalf("%d runs and %d questions in the fixture", len(fx.Runs), len(fx.Asks))
	}
	for _, f := range fx.Runs {
		var r Run
		if err := decodeRun([]byte(f.Stored), &r); err != nil {
			t.Fatalf("%s: %v", f.Stored, err)
		}
		if got, err := json.Marshal(r); err != nil || !jsonEqual(got, f.Decoded) {
			t.Errorf("%s:\ndecoded %s %v\nwant    %s", f.Stored, got, err, f.Decoded)
		}
		if again, err := encodeRun(r); err != nil || string(again) != f.Stored {
			t.Errorf("%s: written again as %s, %v", f.Stored, again, err)
		}
	}
	for _, f := range fx.Asks {
		var a Ask
		if err := decodeAsk([]byte(f.Stored), &a); err != nil {
			t.Fatalf("%s: %v", f.Stored, err)
		}
		if got, err := json.Marshal(a); err != nil || !jsonEqual(got, f.Decoded) {
			t.Errorf("%s:\ndecoded %s %v\nwant    %s", f.Stored, got, err, f.Decoded)
		}
		if again, err := encodeAsk(a); err != nil || string(again) != f.Stored {
			t.Errorf("%s: written again as %s, %v", f.Stored, again, err)
		}
	}
}

// jsonEqual compares an encoding json.Marshal wrote with one from the
// fixture file, which is indented: json.Marshal's bytes are the same when
// the values are.
func jsonEqual(got, want []byte) bool {
	var w bytes.Buffer
	return json.Compact(&w, want) == nil && string(got) == w.String()
}
