package sandflow

import (
	"encoding/json"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// The SDK's own decoding of integers agrees with encoding/json on every
// input: what it accepts decodes to the same value, and what it does not
// is left to json.Unmarshal.
func TestDecodeIntLikeJSON(t *testing.T) {
	inputs := []string{
		"0", "-0", "5", "-17", "42", "007", "+5", "1e3", "1.0", "", "-", "--1", "0x10", "1_000",
		"123456789012345678", "-123456789012345678", "1234567890123456789",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		" 5", "5 ", "null", `"5"`, "true",
	}
	for _, in := range inputs {
		var fast, slow int
		errFast := decodeValue([]byte(in), &fast)
		errSlow := json.Unmarshal([]byte(in), &slow)
		if (errFast == nil) != (errSlow == nil) || fast != slow {
			t.Errorf("%q: SDK %d, %v; encoding/json %d, %v", in, fast, errFast, slow, errSlow)
		}
		var fast64, slow64 int64
		errFast = decodeValue([]byte(in), &fast64)
		errSlow = json.Unmarshal([]byte(in), &slow64)
		if (errFast == nil) != (errSlow == nil) || fast64 != slow64 {
			t.Errorf("%q as int64: SDK %d, %v; encoding/json %d, %v", in, fast64, errFast, slow64, errSlow)
		}
	}
}

// Questions are encoded exactly as encoding/json encodes them, and answers
// decoded to what it decodes, with or without the SDK's fast paths.
func TestAskCodecsLikeJSON(t *testing.T) {
	reqs := []AskRequest{
		{},
		{Prompt: "Go on?", Options: []AskOption{{ID: "ok", Label: "OK"}}},
		{Prompt: "Deploy?", Title: "Release", Display: "modal", AllowFreeform: true,
			Options: []AskOption{{ID: "yes", Label: "Yes", Description: "ship it", Style: "primary"}, {ID: "no", Label: "No"}}},
		{Prompt: `say "hi"`}, {Prompt: "a\nb"}, {Prompt: "<b>&</b>"}, {Prompt: "café"}, {Prompt: "\u2028"},
		{Prompt: "p", Options: []AskOption{{ID: "i\td", Label: "l"}}},
		{Prompt: "p", Options: []AskOption{}},
		{Prompt: "bad \xff utf-8"},
	}
	for _, r := range reqs {
		want, wantErr := json.Marshal(r)
		got, err := appendAskRequest([]byte("x"), r)
		if (err == nil) != (wantErr == nil) || string(got) != "x"+string(want) {
			t.Errorf("%+v: SDK %s, %v; encoding/json %s, %v", r, got, err, want, wantErr)
		}
	}

	answers := []string{
		`{"status":"answered","optionId":"ok"}`, `{"status":"answered","text":"fine"}`,
		`{"text":"a","status":"cancelled","optionId":"x"}`, `{}`, `{"status":"unavailable"}`,
		`{"status":"answered","status":"cancelled"}`, `{"Status":"answered"}`, `{"status": "answered"}`,
		`{"status":"a\"b"}`, `{"status":"café"}`, `{"status":null}`, `{"status":1}`, `{"other":"x"}`,
		`{"status":"answered",}`, `{"status":"answered"`, `{"status"}`, `[]`, `null`, ``, `{,}`,
	}
	for _, a := range answers {
		for _, start := range []Answer{{}, {Status: "old", OptionID: "old", Text: "old"}} {
			fast, slow := start, start
			errFast := decodeValue([]byte(a), &fast)
			errSlow := json.Unmarshal([]byte(a), &slow)
			if (errFast == nil) != (errSlow == nil) || fast != slow {
				t.Errorf("%s into %+v: SDK %+v, %v; encoding/json %+v, %v", a, start, fast, errFast, slow, errSlow)
			}
		}
	}
}

// A step attempt's input decodes as json.Unmarshal decodes it, whatever
// the step's own input holds; what the fast path does not take, it leaves.
func TestStepInputLikeJSON(t *testing.T) {
	var raws []string
	written := map[string]bool{} // as the host writes them
	for _, input := range []string{`5`, `null`, `"s"`, `{"a":[1,2,{"b":null}]}`, `{"x":1,"stepId":"fake","attempt":9}`,
		`",\"stepId\":\""`, `[]`, `-0.5e3`, `"café"`, `true`} {
		in := abi.StepInput{Name: "inc", Input: json.RawMessage(input), StepID: "run_x/3", Attempt: 2, RunID: "run_x"}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, string(b))
		written[string(b)] = true
	}
	for _, name := range []string{"a\"b", "<b>", "é"} {
		b, _ := json.Marshal(abi.StepInput{Name: name, Input: json.RawMessage(`1`), StepID: "s", Attempt: 1, RunID: "r"})
		raws = append(raws, string(b))
	}
	raws = append(raws,
		`{"name":"inc","input":5,"stepId":"s","attempt":1,"runId":"r"} `,
		`{"name":"inc","input":5 ,"stepId":"s","attempt":1,"runId":"r"}`,
		`{"name":"inc","input":{,"stepId":"s","attempt":1,"runId":"r"}`,
		`{"name":"inc","input":,"stepId":"s","attempt":1,"runId":"r"}`,
		`{"name":"inc","input":5,"stepId":"s","attempt":01,"runId":"r"}`,
		`{"name":"inc","input":5,"stepId":"s","attempt":1.5,"runId":"r"}`,
		`{"name":"inc","input":5,"stepId":"s","attempt":1,"runId":"r","x":1}`,
		`{"name":"inc","input":5,"stepId":"s","runId":"r"}`,
		`{"name":"inc","input":5,"stepId":"s","attempt":1,"runId":"r"`,
	)
	for _, raw := range raws {
		var fast, slow abi.StepInput
		ok := decodeStepInput([]byte(raw), &fast)
		errSlow := json.Unmarshal([]byte(raw), &slow)
		if ok && (errSlow != nil || fast.Name != slow.Name || string(fast.Input) != string(slow.Input) ||
			fast.StepID != slow.StepID || fast.Attempt != slow.Attempt || fast.RunID != slow.RunID) {
			t.Errorf("%s: fast %+v (input %s); encoding/json %+v (input %s), %v", raw, fast, fast.Input, slow, slow.Input, errSlow)
		}
		if !ok && written[raw] && plainFields(slow) {
			t.Errorf("%s: the fast path refused an input the host writes", raw)
		}
	}
}

func plainFields(in abi.StepInput) bool {
	return jsonwire.PlainString(in.Name) && jsonwire.PlainString(in.StepID) && jsonwire.PlainString(in.RunID)
}

// Strings decode as encoding/json decodes them.
func TestDecodeStringLikeJSON(t *testing.T) {
	for _, in := range []string{`"plain"`, `""`, `"a\"b"`, `"a\nb"`, `"café"`, `"a"b"`, `"a`, `a"`, `"a" `, `null`, `5`, `"\u0041"`} {
		fast, slow := "old", "old"
		errFast := decodeValue([]byte(in), &fast)
		errSlow := json.Unmarshal([]byte(in), &slow)
		if (errFast == nil) != (errSlow == nil) || fast != slow {
			t.Errorf("%s: SDK %q, %v; encoding/json %q, %v", in, fast, errFast, slow, errSlow)
		}
	}
}

// BenchmarkDecodeAnswer decodes an answer as the host writes it: the
// allocations are what a guest pays on every answer it is given.
func BenchmarkDecodeAnswer(b *testing.B) {
	raw := []byte(`{"status":"answered","optionId":"ok","text":"fine"}`)
	var a Answer
	b.ReportAllocs()
	for b.Loop() {
		a = Answer{}
		if !decodeAnswer(raw, &a) {
			b.Fatal("not decoded")
		}
	}
	if a.OptionID != "ok" {
		b.Fatalf("%+v", a)
	}
}
