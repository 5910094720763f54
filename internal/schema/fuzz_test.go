package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
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

// ApplyDefaults is bounded in work, not only in depth: a schema with a
// "$ref" to a definition whose "allOf" lists k "$ref"s back to it compiles
// (ParseManifest accepts it), and applying its defaults ends at once
// instead of making k^16 calls at depth 32 (with k = 4, about an hour of
// one tool call's goroutine, outside any guest CPU limit).
func TestRegressionApplyDefaultsRefFanOut(t *testing.T) {
	// k = 2 makes about 2^17 visits without the bound, which this test
	// counts at once; k = 4, the case that was found, about 4^17.
	for _, k := range []int{2, 4} {
		refs := strings.TrimSuffix(strings.Repeat(`{"$ref":"#/$defs/a"},`, k), ",")
		// A default, for ApplyDefaults does nothing under a schema without.
		raw := `{"type":"object","$defs":{"a":{"properties":{"x":{"default":1}},"allOf":[` + refs + `]}},"allOf":[{"$ref":"#/$defs/a"}]}`
		s, err := Compile([]byte(raw))
		if err != nil {
			t.Fatalf("the schema does not compile, so the fan-out goes unchecked: %v", err)
		}
		v, err := Decode([]byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		// Past the budget, each call still open tries its remaining
		// subschemas once: at most 33 levels of k each.
		if n, max := s.applyCounted(v), applyBudget+33*k; n > max {
			t.Fatalf("k=%d: ApplyDefaults of {} visited %d schema nodes, over its bound of %d", k, n, max)
		}
		if x, _ := v.(map[string]any)["x"].(json.Number); x != "1" {
			t.Fatalf("k=%d: ApplyDefaults of {} gives %v, want the default x 1", k, v)
		}
	}
}

// An uploaded schema nested deep (1600 levels, 60 KB) is refused (with
// ErrCompile) by its depth, before it is compiled in time that grows
// faster than the square of the depth: the schema is compiled at upload
// (ParseManifest, AddPlugin) and again at every plugin load. One nested
// as deep as MaxSchemaDepth allows compiles.
func TestRegressionCompileDeepNesting(t *testing.T) {
	nested := func(levels int) []byte { // levels objects in properties: depth 2*levels
		return []byte(strings.Repeat(`{"type":"object","properties":{"a":`, levels) + `{}` + strings.Repeat(`}}`, levels))
	}
	if _, err := Compile(nested(MaxSchemaDepth / 2)); err != nil {
		t.Fatalf("a schema %d deep: %v", MaxSchemaDepth, err)
	}
	for _, levels := range []int{MaxSchemaDepth/2 + 1, 1600} {
		if _, err := Compile(nested(levels)); !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("a schema %d deep: %v, want ErrCompile for its depth", 2*levels, err)
		}
	}
}
