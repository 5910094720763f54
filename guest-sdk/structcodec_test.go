package sandflow

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Types the struct codec plans, and types it must leave to encoding/json.
type (
	codecInput struct {
		Mode string `json:"mode"`
		N    int    `json:"n"`
		Asks int    `json:"asks"`
		Name string `json:"name"`
	}
	codecLabel string
	codecMixed struct {
		A       string     `json:"a,omitempty"`
		B       bool       `json:"b"`
		I8      int8       `json:"i8"`
		U16     uint16     `json:"u16,omitempty"`
		U       uint64     `json:",omitempty"`
		F       float64    `json:"f"`
		F32     float32    `json:"f32"`
		Label   codecLabel `json:"label"`
		NoTag   int
		Skipped string `json:"-"`
		Dash    string `json:"-,"`
		hidden  int
	}
	codecEncodable struct {
		Greeting string     `json:"greeting"`
		Count    int64      `json:"count,omitempty"`
		OK       bool       `json:"ok,omitempty"`
		Small    uint8      `json:"small"`
		Label    codecLabel `json:"label,omitempty"`
		hidden   string
	}
	codecEmpty struct{}

	codecEmbedded struct {
		codecInput
		X int `json:"x"`
	}
	codecStringOpt struct {
		N int `json:"n,string"`
	}
	codecDuplicate struct {
		A string
		B string `json:"A"`
	}
	codecTime struct {
		T time.Time `json:"t"`
	}
	codecSlice struct {
		S []string `json:"s"`
	}
	codecPointer struct {
		P *int `json:"p"`
	}
	codecOwn     struct{ A string }
	codecText    string
	codecHasText struct {
		T codecText `json:"t"`
	}
	codecOddName struct {
		A string `json:"a b"`
	}
)

func (c *codecOwn) UnmarshalJSON([]byte) error    { c.A = "own"; return nil }
func (c codecText) MarshalText() ([]byte, error)  { return []byte("text"), nil }
func (c *codecText) UnmarshalText(b []byte) error { *c = codecText("t:" + string(b)); return nil }
func (c codecOwn) MarshalJSON() ([]byte, error)   { return []byte(`"own"`), nil }
func (c codecOddName) unused() string             { return c.A }
func (c codecMixed) unused() int                  { return c.hidden }
func (c codecEncodable) unused() string           { return c.hidden }

func TestStructPlans(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[codecInput](), reflect.TypeFor[codecMixed](), reflect.TypeFor[codecEncodable](), reflect.TypeFor[codecEmpty](),
	} {
		if planOf(typ) == nil {
			t.Errorf("%s is not planned", typ)
		}
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[codecEmbedded](), reflect.TypeFor[codecStringOpt](), reflect.TypeFor[codecDuplicate](),
		reflect.TypeFor[codecTime](), reflect.TypeFor[codecSlice](), reflect.TypeFor[codecPointer](),
		reflect.TypeFor[codecOwn](), reflect.TypeFor[codecHasText](), reflect.TypeFor[codecOddName](),
		reflect.TypeFor[int](), reflect.TypeFor[map[string]int](),
	} {
		if planOf(typ) != nil {
			t.Errorf("%s is planned; encoding/json's handling of it is not the codec's", typ)
		}
	}
}

// checkStructDecode decodes raw into a T both ways, from the same start:
// when the codec takes it, encoding/json must too, with the same value.
// It reports whether the codec took it.
func checkStructDecode[T any](t *testing.T, raw []byte, start T) bool {
	t.Helper()
	fast, slow := start, start
	ok := decodeStruct(raw, reflect.ValueOf(&fast).Elem())
	err := json.Unmarshal(raw, &slow)
	if ok && (err != nil || !reflect.DeepEqual(fast, slow)) {
		t.Fatalf("%T from %q:\ncodec         %+v\nencoding/json %+v, %v", start, raw, fast, slow, err)
	}
	// decodeTyped, with whichever path, gives encoding/json's result.
	typed := start
	terr := decodeTyped(raw, &typed)
	if (terr == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(typed, slow)) {
		t.Fatalf("%T from %q: decodeTyped %+v, %v; encoding/json %+v, %v", start, raw, typed, terr, slow, err)
	}
	return ok
}

var structSeeds = []string{
	`{"mode":"greet","name":"world"}`,
	`{"mode":"greet","n":0,"name":"world"}`,
	`{"asks":3,"mode":"stepsask","n":10}`,
	`{}`,
	`{"mode":"a","mode":"b","n":-7,"n":null,"name":null}`,
	`{"other":{"x":[1,{"y":"z\"q"}],"w":"\\"},"mode":"m","more":[[],{}],"t":true,"f":false,"z":null,"e":1.5e-3}`,
	`{"a":"x","b":true,"i8":-128,"u16":65535,"U":18446744073709551615,"f":1.25,"f32":3.5e2,"label":"L","NoTag":42,"-":"dash"}`,
	`{"b":false,"i8":0,"f":-0,"f32":0.1,"Skipped":"no","hidden":5}`,
	// left to encoding/json, or refused by it
	`{"Mode":"case"}`, `{"MODE":"case","NAME":"x"}`, `{"mode":"\u0041"}`, `{"mode":"a\"b"}`, `{"mode":"é"}`,
	`{"n":1.5}`, `{"n":1e2}`, `{"n":"1"}`, `{"n":true}`, `{"mode":1}`, `{"mode":{}}`, `{"n":99999999999999999999}`,
	`{"i8":128}`, `{"i8":-129}`, `{"u16":-1}`, `{"u16":65536}`, `{"f32":1e39}`, `{"f":1e400}`, `{"b":"true"}`, `{"b":1}`,
	`{ "mode" : "spaced" }`, `{"mode":"<b>"}`, `null`, `[]`, `"s"`, `1`, `{"mode":"x",}`, `{"mode"}`, `{"mode":"x"`,
	`{"label":"L","Label":"l"}`, `{"notag":1}`, `{"nOtAg":2}`, `{"-":"x","Dash":"y"}`,
}

// The codec agrees with encoding/json on every input: the seeds, their
// truncations and random changes, into types it plans and from values
// with fields already set.
func TestStructDecodeLikeJSON(t *testing.T) {
	taken := 0
	check := func(raw []byte) {
		if checkStructDecode(t, raw, codecInput{}) {
			taken++
		}
		checkStructDecode(t, raw, codecInput{Mode: "before", N: 9})
		checkStructDecode(t, raw, codecMixed{})
		checkStructDecode(t, raw, codecMixed{A: "a", F: 2, Skipped: "s"})
		checkStructDecode(t, raw, codecEncodable{})
		checkStructDecode(t, raw, codecEmpty{})
		checkStructDecode(t, raw, codecOwn{})
		checkStructDecode(t, raw, codecStringOpt{})
	}
	for _, s := range structSeeds {
		check([]byte(s))
		for n := range len(s) {
			check([]byte(s[:n]))
		}
	}
	if taken < 6 {
		t.Errorf("the codec took %d seeds of codecInput, want at least 6", taken)
	}
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte(`{}[]":,0123456789-+.eE tnulfrsa\<é` + "\x00")
	for range 30000 {
		b := []byte(structSeeds[r.IntN(len(structSeeds))])
		for range 1 + r.IntN(3) {
			if len(b) == 0 {
				break
			}
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		check(b)
	}
}

func FuzzStructDecode(f *testing.F) {
	for _, s := range structSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkStructDecode(t, raw, codecInput{})
		checkStructDecode(t, raw, codecMixed{I8: 1})
	})
}

// The codec writes json.Marshal's bytes for every value it takes, through
// appendValue as a step's value and directly.
func TestStructEncodeLikeJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	chars := []byte("ab <>&\"\\\x01\x7fé/")
	str := func() string {
		b := make([]byte, r.IntN(4))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
	taken := 0
	for i := range 5000 {
		v := codecEncodable{Greeting: str(), Count: r.Int64N(5) - 2, OK: r.IntN(2) == 0, Small: uint8(r.IntN(256)), Label: codecLabel(str()), hidden: "h"}
		if i%7 == 0 {
			v.Count = -1 << 63
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendStruct([]byte("prefix"), v)
		if ok {
			taken++
			if string(got) != "prefix"+string(want) {
				t.Fatalf("%+v: codec %s, json.Marshal %s", v, got, want)
			}
		} else if string(got) != "prefix" {
			t.Fatalf("%+v: declined, but changed dst to %q", v, got)
		}
		if b, err := appendValue(nil, any(v)); err != nil || string(b) != string(want) {
			t.Fatalf("%+v: appendValue %s, %v; json.Marshal %s", v, b, err, want)
		}
	}
	if taken < 500 {
		t.Errorf("the codec took %d of 5000 values", taken)
	}
	for _, v := range []any{codecEmpty{}, codecMixed{F: 1.5}, codecOwn{A: "x"}, codecTime{}, codecInput{Mode: strings.Repeat("m", 3)}} {
		want, _ := json.Marshal(v)
		if b, err := appendValue(nil, v); err != nil || string(b) != string(want) {
			t.Fatalf("%T: appendValue %s, %v; json.Marshal %s", v, b, err, want)
		}
	}
}

// FuzzStructEncode: the codec writes json.Marshal's bytes for every value
// of a planned struct, floats (-0, 1e21, NaN) and strings (HTML
// characters, U+2028, invalid UTF-8) included, or declines what
// json.Marshal refuses; and what it writes decodes back as json.Unmarshal
// decodes it.
func FuzzStructEncode(f *testing.F) {
	f.Add("plain", int64(1), uint64(2), 1.5, true)
	f.Add("<b>&amp;</b> \u2028 caf\u00e9", int64(-128), uint64(1<<64-1), math.Copysign(0, -1), false)
	f.Add("\xff\xed\xa0\x80\"\\\x00\x7f", int64(-1<<63), uint64(65535), 1e21, true)
	f.Add("", int64(0), uint64(0), math.NaN(), false)
	f.Add("x", int64(127), uint64(0), 1e-7, false)
	f.Fuzz(func(t *testing.T, s string, n int64, u uint64, x float64, b bool) {
		for _, v := range []any{
			codecMixed{A: s, B: b, I8: int8(n), U16: uint16(u), U: u, F: x, F32: float32(x), Label: codecLabel(s), NoTag: int(n), Skipped: s, Dash: s},
			codecEncodable{Greeting: s, Count: n, OK: b, Small: uint8(u), Label: codecLabel(s)},
			codecInput{Mode: s, N: int(n), Asks: int(u), Name: s},
		} {
			want, err := json.Marshal(v)
			got, ok := appendStruct([]byte("prefix"), v)
			if ok && (err != nil || string(got) != "prefix"+string(want)) || !ok && (err == nil || string(got) != "prefix") {
				t.Fatalf("%+v: codec %s, %v; json.Marshal %s, %v", v, got, ok, want, err)
			}
			if b, err2 := appendValue(nil, v); (err2 == nil) != (err == nil) || err == nil && string(b) != string(want) {
				t.Fatalf("%+v: appendValue %s, %v; json.Marshal %s, %v", v, b, err2, want, err)
			}
			if err == nil {
				switch v.(type) {
				case codecMixed:
					checkStructDecode(t, want, codecMixed{})
				case codecEncodable:
					checkStructDecode(t, want, codecEncodable{})
				default:
					checkStructDecode(t, want, codecInput{})
				}
			}
		}
	})
}

// FuzzValueEncode: appendValue and appendTyped write json.Marshal's bytes
// for the scalars, strings and raw JSON they write themselves (-0,
// 1e400, raw JSON with white space or HTML characters), and fail where
// it fails.
func FuzzValueEncode(f *testing.F) {
	for _, s := range []string{`-0`, `1e400`, `123456789012345678901234567890`, ` { "a" : "<b>" } `, "\"\u2028\"", "\"\xff\"",
		`{"a":1`, ``, `"\ud800"`, `[1,2]`} {
		f.Add(s, []byte(s), math.Copysign(0, -1))
	}
	f.Add("<&>", []byte(nil), 1e21)
	f.Add("\xed\xa0\x80", []byte(`null`), 0.1)
	f.Add("a", []byte(`{"status":"a","status":null,"text":"\u00e9 \ud800","optionId":"<"}`), 1.0)
	f.Add("a", []byte(`{"name":"in\u0063","input": { "a" : 1 } ,"stepId":"s","attempt":-0,"runId":"r"}`), 1.0)
	f.Fuzz(func(t *testing.T, s string, raw []byte, x float64) {
		for _, v := range []any{s, json.RawMessage(raw), x, int64(len(s)) - 3, len(raw) > 2} {
			want, err := json.Marshal(v)
			got, err2 := appendValue([]byte("p"), v)
			if (err == nil) != (err2 == nil) || err == nil && string(got) != "p"+string(want) {
				t.Fatalf("%T %v: appendValue %s, %v; json.Marshal %s, %v", v, v, got, err2, want, err)
			}
		}
		want, _ := json.Marshal(s)
		if got, err := appendTyped(nil, s); err != nil || string(got) != string(want) {
			t.Fatalf("%q: appendTyped %s, %v; json.Marshal %s", s, got, err, want)
		}
		var fast, slow string
		errFast, errSlow := decodeValue(raw, &fast), json.Unmarshal(raw, &slow)
		if (errFast == nil) != (errSlow == nil) || fast != slow {
			t.Fatalf("%q as a string: SDK %q, %v; encoding/json %q, %v", raw, fast, errFast, slow, errSlow)
		}
		var fa, sa Answer
		errFast, errSlow = decodeValue(raw, &fa), json.Unmarshal(raw, &sa)
		if (errFast == nil) != (errSlow == nil) || fa != sa {
			t.Fatalf("%q as an answer: SDK %+v, %v; encoding/json %+v, %v", raw, fa, errFast, sa, errSlow)
		}
		var fs, ss abi.StepInput
		if decodeStepInput(raw, &fs) && (json.Unmarshal(raw, &ss) != nil || !reflect.DeepEqual(fs, ss)) {
			t.Fatalf("%q as a step input: SDK %+v; encoding/json %+v", raw, fs, ss)
		}
	})
}
