package sandflow

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// Plain structs (a tool's input and output, a step's) are decoded and
// encoded here without encoding/json, whose reflection-driven decoder is
// most of a trivial call's guest time in WebAssembly. A struct qualifies
// when encoding/json's handling of it is simple to follow exactly: its
// exported fields are strings, booleans, integers or (to decode only)
// floats, none embedded, none with the string option, no two with one
// name, and neither it nor a field's type has its own JSON or text
// methods. Values are read and written with abi/jsonwire, as
// json.Unmarshal reads and json.Marshal writes them; a key the codec
// cannot match as encoding/json would (one that matches a field only
// case-insensitively) goes to encoding/json, which decides, as does
// malformed JSON. structcodec_test.go holds the two to the same results.

// structPlan is how a struct type is read and written.
type structPlan struct {
	fields []planField
	byName map[string]int  // JSON name -> index in fields
	folded map[string]bool // lower-cased JSON names
}

type planField struct {
	name      string
	index     int // in the struct
	kind      reflect.Kind
	bits      int // of a number
	omitEmpty bool
}

// plans caches structPlan by type; nil means the type does not qualify.
// The SDK's types are planned while the guest initialises (warmCodec), so
// their plans are in the image every run starts from.
var plans sync.Map // reflect.Type -> *structPlan

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
)

// hasMethods reports whether t or *t has JSON or text methods of its own.
func hasMethods(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) ||
		t.Implements(jsonMarshaler) || p.Implements(jsonMarshaler) ||
		t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler) ||
		t.Implements(textMarshaler) || p.Implements(textMarshaler)
}

// planOf returns t's plan, or nil when t does not qualify.
func planOf(t reflect.Type) *structPlan {
	if p, ok := plans.Load(t); ok {
		return p.(*structPlan)
	}
	p := makePlan(t)
	plans.Store(t, p)
	return p
}

func makePlan(t reflect.Type) *structPlan {
	if t.Kind() != reflect.Struct || hasMethods(t) {
		return nil
	}
	p := &structPlan{byName: map[string]int{}, folded: map[string]bool{}}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		omit := false
		for opts != "" {
			var o string
			o, opts, _ = strings.Cut(opts, ",")
			switch o {
			case "omitempty":
				omit = true
			case "":
			default: // string, omitzero and whatever else: encoding/json's
				return nil
			}
		}
		if !plainName(name) || hasMethods(f.Type) {
			return nil
		}
		pf := planField{name: name, index: i, kind: f.Type.Kind(), omitEmpty: omit}
		switch pf.kind {
		case reflect.String, reflect.Bool:
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			pf.bits = f.Type.Bits()
		case reflect.Float32, reflect.Float64:
			pf.bits = f.Type.Bits()
		default:
			return nil
		}
		if _, dup := p.byName[name]; dup {
			return nil
		}
		p.byName[name] = len(p.fields)
		p.folded[strings.ToLower(name)] = true
		p.fields = append(p.fields, pf)
	}
	return p
}

// plainName reports whether a JSON name is letters, digits, _ and -, in
// ASCII: one encoding/json takes as it is and folds as ASCII.
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// decodeStruct decodes raw into the struct rv (addressable) as
// json.Unmarshal does, with abi/jsonwire's readers, reporting whether it
// did; when it did not, it may have set some fields, and the caller
// decodes with encoding/json from the value it started with.
func decodeStruct(raw []byte, rv reflect.Value) bool {
	p := planOf(rv.Type())
	if p == nil {
		return false
	}
	i, ok := jsonwire.Object(raw, jsonwire.SkipSpace(raw, 0), func(key []byte, i int) (int, bool) {
		if n, found := p.byName[string(key)]; found {
			return p.fields[n].decode(raw, i, rv)
		}
		if !asciiKey(key) || p.folded[strings.ToLower(string(key))] {
			return 0, false // a case-insensitive match: encoding/json's rules
		}
		return jsonwire.SkipValue(raw, i)
	})
	return ok && jsonwire.End(raw, i)
}

// asciiKey reports whether a key is ASCII, which encoding/json folds as
// strings.ToLower does (others it folds by Unicode's rules: ſ is s).
func asciiKey(key []byte) bool {
	for _, c := range key {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// decode reads the field's value at raw[i] into rv's field, returning the
// index after it.
func (f *planField) decode(raw []byte, i int, rv reflect.Value) (int, bool) {
	if jsonwire.IsNull(raw, i) { // null leaves the field as it is
		return i + 4, true
	}
	fv := rv.Field(f.index)
	switch f.kind {
	case reflect.String:
		s, j, ok := jsonwire.ReadString(raw, i)
		if ok {
			fv.SetString(string(s))
		}
		return j, ok
	case reflect.Bool:
		v, j, ok := jsonwire.ReadBool(raw, i)
		if ok {
			fv.SetBool(v)
		}
		return j, ok
	case reflect.Float32, reflect.Float64:
		x, j, ok := jsonwire.ReadFloat(raw, i, f.bits)
		if ok {
			fv.SetFloat(x)
		}
		return j, ok
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x, j, ok := jsonwire.ReadUint(raw, i, 1<<f.bits-1)
		if ok {
			fv.SetUint(x)
		}
		return j, ok
	default:
		x, j, ok := jsonwire.ReadInt(raw, i, -1<<(f.bits-1), 1<<(f.bits-1)-1)
		if ok {
			fv.SetInt(x)
		}
		return j, ok
	}
}

// appendStruct appends the JSON encoding of v when it is a plain struct,
// reporting whether it wrote it (json.Marshal's bytes); on false dst is
// unchanged, and the caller encodes v with encoding/json.
func appendStruct(dst []byte, v any) ([]byte, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Struct {
		return dst, false
	}
	p := planOf(rv.Type())
	if p == nil {
		return dst, false
	}
	b := append(dst, '{')
	first := true
	for k := range p.fields {
		f := &p.fields[k]
		fv := rv.Field(f.index)
		if f.omitEmpty && fv.IsZero() {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(append(append(b, '"'), f.name...), '"', ':')
		switch f.kind {
		case reflect.String:
			b = jsonwire.AppendString(b, fv.String())
		case reflect.Bool:
			b = strconv.AppendBool(b, fv.Bool())
		case reflect.Float32, reflect.Float64:
			var ok bool
			if b, ok = jsonwire.AppendFloat(b, fv.Float(), f.bits); !ok {
				return dst, false // NaN or an infinity: json.Marshal's error
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b = jsonwire.AppendUint(b, fv.Uint())
		default:
			b = jsonwire.AppendInt(b, fv.Int())
		}
	}
	return append(b, '}'), true
}
