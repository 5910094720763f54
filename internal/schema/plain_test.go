package schema

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var plainSeeds = []string{
	`{"mode":"greet","name":"world"}`,
	`{"a":[1,-2.5e3,true,false,null,{"b":{}}],"c":"d","a":0}`,
	`[]`, `{}`, `"s"`, `0`, `-0.0`, `1E+2`, `null`, `true`,
	`{"z":1,"a":2,"m":{"y":[],"b":"x"}}`,
	// left to the validator's decoder
	`{"a":"x\"y"}`, `{"a":"\u00e9"}`, `{"a": 1}`, ` {}`, `{"a":"é"}`, `{"a":"<"}`, `{"a":1}x`, `{"a":}`,
	`{"a":01}`, `{"a":[1,]}`, `{"a\\b":1}`, `[1 ]`,
}

// checkPlain decodes raw both ways and encodes the result both ways: when
// the hand reader takes it, the validator's decoder must give the same
// value; the hand writer must give json.Marshal's bytes when it writes.
func checkPlain(t *testing.T, raw []byte) bool {
	t.Helper()
	fast, ok := decodePlain(raw)
	slow, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if ok && (err != nil || !reflect.DeepEqual(fast, slow)) {
		t.Fatalf("%q:\nhand      %#v\nvalidator %#v, %v", raw, fast, slow, err)
	}
	if err == nil {
		want, merr := json.Marshal(slow)
		got, eerr := Encode(slow)
		if (merr == nil) != (eerr == nil) || string(got) != string(want) {
			t.Fatalf("%q: Encode %s, %v; json.Marshal %s, %v", raw, got, eerr, want, merr)
		}
	}
	return ok
}

func TestPlainLikeValidator(t *testing.T) {
	taken := 0
	for _, s := range plainSeeds {
		for n := 0; n <= len(s); n++ {
			if checkPlain(t, []byte(s[:n])) && n == len(s) {
				taken++
			}
		}
	}
	if taken != 11 {
		t.Errorf("the hand reader took %d seeds whole, want the first 11", taken)
	}
	r := rand.New(rand.NewPCG(11, 12))
	alphabet := []byte(`{}[]":,0123456789-+.eE tnulfrsa\<é`)
	for range 30000 {
		b := []byte(plainSeeds[r.IntN(len(plainSeeds))])
		for range 1 + r.IntN(3) {
			if len(b) > 0 {
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			}
		}
		checkPlain(t, b)
	}
	// Values a default put in: not the decoder's types, or not plain.
	for _, v := range []any{
		map[string]any{"f": 1.5, "s": "a"}, map[string]any{"s": "<"}, []any{json.Number("1e2"), "x"},
		map[string]any{"n": json.Number("bad")}, map[string]any{"é": 1},
	} {
		want, merr := json.Marshal(v)
		got, eerr := Encode(v)
		if (merr == nil) != (eerr == nil) || string(got) != string(want) {
			t.Fatalf("%#v: Encode %s, %v; json.Marshal %s, %v", v, got, eerr, want, merr)
		}
	}
}

func FuzzPlain(f *testing.F) {
	for _, s := range plainSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkPlain(t, raw) })
}
