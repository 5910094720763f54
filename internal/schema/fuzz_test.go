package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// FuzzSchema: Compile never panics and refuses with ErrCompile; for a
// schema it compiles and an input Decode reads, ApplyDefaults and Validate
// never panic, ApplyDefaults leaves the schema alone (defaults are copied,
// not shared) and is idempotent, and Validate returns nil or problems.
//
// Seeds: testdata/fuzz/FuzzSchema/, (schema, tool input) pairs: defaults
// in nested objects, through allOf and local $refs, escaped pointers,
// outside references, other drafts, numbers out of float range.
func FuzzSchema(f *testing.F) {
	f.Fuzz(func(t *testing.T, schema, input []byte) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		s, err := Compile(schema)
		if err != nil {
			if !errors.Is(err, ErrCompile) {
				t.Fatalf("Compile error %v does not wrap ErrCompile", err)
			}
			if s != nil {
				t.Fatalf("Compile returned a schema with error %v", err)
			}
			return
		}
		v, err := Decode(input)
		if err != nil {
			return
		}
		before, err := json.Marshal(s.doc)
		if err != nil {
			t.Fatalf("the schema document does not encode: %v", err)
		}
		s.ApplyDefaults(v)
		once, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("the input with defaults does not encode: %v", err)
		}
		w, err := Decode(once)
		if err != nil {
			t.Fatalf("the input with defaults does not decode: %v", err)
		}
		s.ApplyDefaults(w)
		if twice, _ := json.Marshal(w); string(twice) != string(once) {
			t.Fatalf("ApplyDefaults is not idempotent:\nonce:  %s\ntwice: %s", once, twice)
		}
		fuzzScribble(v)
		if after, _ := json.Marshal(s.doc); string(after) != string(before) {
			t.Fatalf("changing an input after ApplyDefaults changed the schema:\nbefore: %s\nafter:  %s", before, after)
		}
		problems := s.Validate(w)
		if problems != nil && len(problems) == 0 {
			t.Fatalf("Validate returned an empty, non-nil list")
		}
		if again := s.Validate(w); !reflect.DeepEqual(again, problems) {
			t.Fatalf("Validate is not deterministic: %q then %q", problems, again)
		}
	})
}

// fuzzScribble changes every object and array in v.
func fuzzScribble(v any) {
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			fuzzScribble(e)
		}
		t["\x00scribbled"] = true
	case []any:
		for i, e := range t {
			fuzzScribble(e)
			t[i] = "scribbled"
		}
	}
}

// within runs fn and reports whether it returned within d. When it does
// not, fn is left running in the background.
func within(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ApplyDefaults is bounded in work, not only in depth: a schema with a
// "$ref" to a definition whose "allOf" lists k "$ref"s back to it compiles
// (ParseManifest accepts it), and applying its defaults ends at once
// instead of making k^16 calls at depth 32 (with k = 4, about an hour of
// one tool call's goroutine, outside any guest CPU limit).
func TestRegressionApplyDefaultsRefFanOut(t *testing.T) {
	refs := strings.TrimSuffix(strings.Repeat(`{"$ref":"#/$defs/a"},`, 4), ",")
	raw := `{"type":"object","$defs":{"a":{"allOf":[` + refs + `]}},"allOf":[{"$ref":"#/$defs/a"}]}`
	s, err := Compile([]byte(raw))
	if err != nil {
		t.Fatalf("the schema does not compile, so the fan-out goes unchecked: %v", err)
	}
	v, err := Decode([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !within(2*time.Second, func() { s.ApplyDefaults(v) }) {
		t.Fatalf("ApplyDefaults of {} under a %d-byte schema did not finish in 2s", len(raw))
	}
}

// An uploaded schema nested deep (1600 levels, 60 KB) is compiled or
// refused (with ErrCompile) at once, not in time that grows faster than
// the square of the depth: the schema is compiled at upload (ParseManifest,
// AddPlugin) and again at every plugin load.
func TestRegressionCompileDeepNesting(t *testing.T) {
	const depth = 1600
	raw := strings.Repeat(`{"type":"object","properties":{"a":`, depth) + `{}` + strings.Repeat(`}}`, depth)
	var err error
	if !within(2*time.Second, func() { _, err = Compile([]byte(raw)) }) {
		t.Fatalf("Compile of a %d-byte schema nested %d deep did not finish (compile or refuse) in 2s", len(raw), depth)
	}
	if err != nil && !errors.Is(err, ErrCompile) {
		t.Fatalf("Compile error %v does not wrap ErrCompile", err)
	}
}
