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
// methods. A value qualifies when it is what json.Marshal would write
// itself: compact, printable ASCII without <, > and &, and keys and
// strings without escapes. Anything else goes to encoding/json, which
// decides; structcodec_test.go holds the two to the same results.

// structPlan is how a struct type is read and written.
type structPlan struct {
	fields []planField
	byName map[string]int  // JSON name -> index in fields
	folded map[string]bool // lower-cased JSON names
	encode bool            // every field can be written (no floats)
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
	p := &structPlan{byName: map[string]int{}, folded: map[string]bool{}, encode: true}
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
			p.encode = false // json.Marshal's float format is its own
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

// decodeStruct decodes raw into the struct rv (addressable), reporting
// whether it did; when it did not, it may have set some fields, and the
// caller decodes with encoding/json from the value it started with.
func decodeStruct(raw []byte, rv reflect.Value) bool {
	p := planOf(rv.Type())
	if p == nil || !jsonwire.PlainRaw(raw) || raw[0] != '{' {
		return false
	}
	// raw is one compact, valid JSON value of printable ASCII.
	i := 1
	if raw[i] == '}' {
		return true
	}
	for {
		key, j, ok := jsonwire.StringAt(raw, i)
		if !ok {
			return false
		}
		i = j + 1 // past the colon
		n, found := p.byName[string(key)]
		if !found {
			if p.folded[strings.ToLower(string(key))] {
				return false // a case-insensitive match: encoding/json's rules
			}
			i = jsonwire.ValueEnd(raw, i)
		} else if i, ok = p.fields[n].decode(raw, i, rv); !ok {
			return false
		}
		if raw[i] == '}' {
			return true
		}
		i++ // past the comma
	}
}

// decode reads the field's value at raw[i] into rv's field, returning the
// index after it.
func (f *planField) decode(raw []byte, i int, rv reflect.Value) (int, bool) {
	if raw[i] == 'n' { // null leaves the field as it is
		return i + 4, true
	}
	fv := rv.Field(f.index)
	switch f.kind {
	case reflect.String:
		s, j, ok := jsonwire.StringAt(raw, i)
		if !ok {
			return 0, false
		}
		fv.SetString(string(s))
		return j, true
	case reflect.Bool:
		switch raw[i] {
		case 't':
			fv.SetBool(true)
			return i + 4, true
		case 'f':
			fv.SetBool(false)
			return i + 5, true
		}
		return 0, false
	}
	j := jsonwire.NumberEnd(raw, i)
	if j == i {
		return 0, false // not a number: encoding/json's type error
	}
	lit := string(raw[i:j])
	switch f.kind {
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(lit, f.bits)
		if err != nil {
			return 0, false
		}
		fv.SetFloat(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x, err := strconv.ParseUint(lit, 10, f.bits)
		if err != nil {
			return 0, false
		}
		fv.SetUint(x)
	default:
		x, err := strconv.ParseInt(lit, 10, f.bits)
		if err != nil {
			return 0, false
		}
		fv.SetInt(x)
	}
	return j, true
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
	if p == nil || !p.encode {
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
			s := fv.String()
			if !jsonwire.PlainString(s) {
				return dst, false
			}
			b = append(append(append(b, '"'), s...), '"')
		case reflect.Bool:
			b = strconv.AppendBool(b, fv.Bool())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b = strconv.AppendUint(b, fv.Uint(), 10)
		default:
			b = strconv.AppendInt(b, fv.Int(), 10)
		}
	}
	return append(b, '}'), true
}
