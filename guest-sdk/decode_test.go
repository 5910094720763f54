package sandflow

import (
	"encoding/json"
	"testing"
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
