package jsonwire

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// The seeds every differential test starts from: the inputs on which
// hand-written JSON codecs have gone wrong.
var stringSeeds = []string{
	"", "abc", "a b", `a"b`, `a\b`, "<script>&amp;</script>", "\x00\x01\x1f\x7f", "\b\f\n\r\t",
	"caf\u00e9", "\u2028\u2029", "\xe2\x80", "\xe2\x80\xa8x", "\xff", "a\xc3", "\xed\xa0\x80", "😀", "\xf4\x90\x80\x80",
}

var rawSeeds = []string{
	`1`, `-0`, `-0.0`, `1e400`, `-1e-400`, `123456789012345678901234567890`, `0.1e+2`, `0.`, `01`, `1e`, `.5`, `-`, `--1`,
	`"a"`, `"\u00e9"`, `"\u00g9"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`, `"open`, `"a"b`, `"\ud800"`, `"\udc00\ud800"`, `"\ud83d\ude00"`,
	"\"\xff\"", "\"\u2028\"", "\"<&>\"", "\"\t\"",
	`{}`, `[]`, `{"a":1,"b":[true,false,null,{"c":"d"}]}`, `{"a":1,}`, `[1,]`, `{"a"}`, `{1:2}`, `{"a":1,"a":2}`,
	` {"a" : [ 1 , 2 ] } `, "\t\n\r 1", `[ "a b" ]`, `tru`, `nulll`, `true false`, `[[[[[]]]]]`, ``, ` `,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
}

// FuzzAppendString: AppendString writes json.Marshal's bytes for every
// string.
func FuzzAppendString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); string(got[1:]) != string(want) {
			t.Fatalf("AppendString(%q) = %s, json.Marshal %s", s, got[1:], want)
		}
		if got := AppendString(nil, []byte(s)); string(got) != string(want) {
			t.Fatalf("AppendString([]byte(%q)) = %s, json.Marshal %s", s, got, want)
		}
		if PlainString(s) && string(want) != `"`+s+`"` {
			t.Fatalf("PlainString(%q), but json.Marshal writes %s", s, want)
		}
	})
}

// FuzzAppendRaw: AppendRaw writes json.Marshal's bytes for every
// json.RawMessage, and fails where it fails.
func FuzzAppendRaw(f *testing.F) {
	for _, s := range rawSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(b []byte) {
			want, err := json.Marshal(json.RawMessage(b))
			got, ok := AppendRaw([]byte("x"), b)
			if ok != (err == nil) || ok && string(got[1:]) != string(want) || !ok && string(got) != "x" {
				t.Fatalf("AppendRaw(%q) = %q, %v; json.Marshal %q, %v", b, got, ok, want, err)
			}
		}
		check(b)
		if len(b) == 0 {
			check(nil)
		}
	})
}

// FuzzAppendFloat: AppendFloat writes json.Marshal's bytes for every
// float64 and float32, and fails where it fails.
func FuzzAppendFloat(f *testing.F) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e20, 1e21, 1e-6, 1e-7, 123456789, math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.MaxFloat32, math.Inf(1), math.NaN(), 0.1, 5e-324} {
		f.Add(math.Float64bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		want, err := json.Marshal(x)
		got, ok := AppendFloat(nil, x, 64)
		if ok != (err == nil) || ok && string(got) != string(want) {
			t.Fatalf("AppendFloat(%v, 64) = %s, %v; json.Marshal %s, %v", x, got, ok, want, err)
		}
		y := math.Float32frombits(uint32(bits))
		want, err = json.Marshal(y)
		got, ok = AppendFloat(nil, float64(y), 32)
		if ok != (err == nil) || ok && string(got) != string(want) {
			t.Fatalf("AppendFloat(%v, 32) = %s, %v; json.Marshal %s, %v", y, got, ok, want, err)
		}
	})
}

// FuzzAppendTime: AppendTime writes json.Marshal's bytes for every time
// the store can hold and for ones it cannot, in any zone.
func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int32(0), false)
	f.Add(time.Date(2026, 12, 1, 14, 7, 36, 931291011, time.UTC).UnixNano(), int32(7200), true)
	f.Add(int64(math.MaxInt64), int32(-86400), true)
	f.Add(int64(math.MinInt64), int32(59), true)
	f.Fuzz(func(t *testing.T, sec int64, offset int32, zoned bool) {
		at := time.Unix(sec, int64(uint32(offset))%1e9).UTC()
		if zoned {
			at = at.In(time.FixedZone("z", int(offset)))
		}
		want, err := json.Marshal(at)
		got, ok := AppendTime(nil, at)
		if ok != (err == nil) || ok && string(got) != string(want) || len(got) > MaxTimeLen {
			t.Fatalf("AppendTime(%v) = %s, %v; json.Marshal %s, %v", at, got, ok, want, err)
		}
	})
}

// FuzzSkipValue: SkipValue takes what json.Valid takes, with white space
// around it, and AppendRaw and ReadRaw agree.
func FuzzSkipValue(f *testing.F) {
	for _, s := range rawSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := SkipSpace(b, 0)
		j, ok := SkipValue(b, i)
		got := ok && End(b, j)
		if want := json.Valid(b); got != want {
			t.Fatalf("SkipValue(%q) = %d, %v; json.Valid %v", b, j, ok, want)
		}
		if got {
			var m json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if r, k, ok := ReadRaw(b, i); !ok || k != j || !bytes.Equal(r, m) {
				t.Fatalf("ReadRaw(%q) = %q; json.Unmarshal %q", b, r, m)
			}
		}
	})
}

// FuzzReadString: ReadString decodes every string as json.Unmarshal does
// (lone surrogates, invalid UTF-8 and all) and refuses what it refuses.
func FuzzReadString(f *testing.F) {
	for _, s := range rawSeeds {
		f.Add([]byte(s))
	}
	for _, s := range stringSeeds {
		f.Add(append([]byte(`"`), append([]byte(s), '"')...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want string
		err := json.Unmarshal(b, &want)
		v, j, ok := ReadString(b, 0)
		ok = ok && End(b, j)
		if isString := len(b) > 0 && b[0] == '"'; isString && ok != (err == nil) || ok && string(v) != want {
			t.Fatalf("ReadString(%q) = %q, %v; json.Unmarshal %q, %v", b, v, ok, want, err)
		}
		if ok {
			if k, v2, ok := Key(append(b[:j:j], ':', '1'), 0); !ok || string(k) != want || v2 != j+1 {
				t.Fatalf("Key(%q:1) = %q, %d, %v", b, k, v2, ok)
			}
		}
	})
}

// FuzzReadNumber: ReadUint and ReadInt take a number exactly when
// json.Unmarshal stores it in the unsigned and signed integers of 8, 32
// and 64 bits, with the same value.
func FuzzReadNumber(f *testing.F) {
	for _, s := range []string{`0`, `-0`, `1`, `-1`, `255`, `256`, `-128`, `-129`, `4294967295`, `4294967296`, `-2147483648`,
		`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`, `18446744073709551615`,
		`18446744073709551616`, `1e2`, `1.0`, `1E400`, `01`, `-01`, `00`, `- 1`, `123456789012345678901234567890`, `1x`, `1 `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		type limits struct {
			umax     uint64
			min, max int64
		}
		for _, l := range []limits{{math.MaxUint8, math.MinInt8, math.MaxInt8}, {math.MaxUint32, math.MinInt32, math.MaxInt32},
			{math.MaxUint64, math.MinInt64, math.MaxInt64}} {
			intLit := len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') && json.Valid(b) && !bytes.ContainsAny(b, ".eE")
			wantU, errU := unmarshalUint(b, l.umax)
			n, j, ok := ReadUint(b, 0, l.umax)
			if ok = ok && End(b, j); ok && (errU != nil || n != wantU) || !ok && errU == nil && intLit {
				t.Fatalf("ReadUint(%q, %d) = %d, %v; json.Unmarshal %d, %v", b, l.umax, n, ok, wantU, errU)
			}
			wantI, errI := unmarshalInt(b, l.min, l.max)
			m, j, ok := ReadInt(b, 0, l.min, l.max)
			if ok = ok && End(b, j); ok && (errI != nil || m != wantI) || !ok && errI == nil && intLit {
				t.Fatalf("ReadInt(%q, %d, %d) = %d, %v; json.Unmarshal %d, %v", b, l.min, l.max, m, ok, wantI, errI)
			}
		}
	})
}

func unmarshalUint(b []byte, max uint64) (uint64, error) {
	switch max {
	case math.MaxUint8:
		var v uint8
		err := json.Unmarshal(b, &v)
		return uint64(v), err
	case math.MaxUint32:
		var v uint32
		err := json.Unmarshal(b, &v)
		return uint64(v), err
	}
	var v uint64
	err := json.Unmarshal(b, &v)
	return v, err
}

func unmarshalInt(b []byte, min, max int64) (int64, error) {
	switch max {
	case math.MaxInt8:
		var v int8
		err := json.Unmarshal(b, &v)
		return int64(v), err
	case math.MaxInt32:
		var v int32
		err := json.Unmarshal(b, &v)
		return int64(v), err
	}
	var v int64
	err := json.Unmarshal(b, &v)
	return v, err
}
