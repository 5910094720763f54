// Package schema compiles and applies the JSON Schemas of tool manifests:
// draft 2020-12 unless the schema names another, validation with one
// message per failed check, and filling omitted properties from their
// defaults.
//
// Schemas come from plugin uploads, so they are untrusted: references to
// anything outside the schema itself are refused, never loaded.
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrCompile is returned when a schema is malformed or refers outside itself.
var ErrCompile = errors.New("schema does not compile")

// Schema is a compiled schema. It is safe for concurrent use.
type Schema struct {
	sch *jsonschema.Schema
	doc any
	// defaults: the schema has a "default" somewhere, so ApplyDefaults
	// may have something to do.
	defaults bool
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %s; only references within the schema are allowed", url)
}

// Bounds on an uploaded schema: compiling one costs more than linear time
// in its nesting, so a small hostile schema could hold a CPU for minutes.
const (
	MaxSchemaBytes = 256 << 10
	MaxSchemaDepth = 64
)

// Compile compiles a schema given as JSON.
func Compile(raw []byte) (*Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes is over the limit of %d", ErrCompile, len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrCompile, err)
	}
	if d := depth(doc, 0); d > MaxSchemaDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d levels", ErrCompile, MaxSchemaDepth)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = "sandflow:///schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCompile, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCompile, err)
	}
	return &Schema{sch: sch, doc: doc, defaults: hasKey(doc, "default")}, nil
}

// Decode parses JSON the way Validate expects it (numbers kept exact, as
// json.Number).
func Decode(raw []byte) (any, error) {
	if v, ok := decodePlain(raw); ok {
		return v, nil
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}

// Validate checks a decoded value and returns one "location: message" per
// failed check, or nil when it is valid.
func (s *Schema) Validate(v any) []string {
	err := s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(u jsonschema.OutputUnit)
	walk = func(u jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			loc := u.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			out = append(out, loc+": "+u.Error.String())
		}
		for _, e := range u.Errors {
			walk(e)
		}
	}
	walk(*ve.BasicOutput())
	if len(out) == 0 {
		out = []string{strings.ReplaceAll(ve.Error(), "\n", " ")}
	}
	sort.Strings(out)
	return out
}

// IsObjectSchema reports whether the schema can only accept JSON objects:
// it says "type": "object".
func (s *Schema) IsObjectSchema() bool {
	m, ok := s.doc.(map[string]any)
	if !ok {
		return false
	}
	switch t := m["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return len(t) == 1 && t[0] == "object"
	}
	return false
}

// depth returns how deeply a JSON value nests, stopping past the limit.
func depth(v any, d int) int {
	if d > MaxSchemaDepth {
		return d
	}
	max := d
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			max = maxInt(max, depth(e, d+1))
		}
	case []any:
		for _, e := range t {
			max = maxInt(max, depth(e, d+1))
		}
	}
	return max
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// applyBudget bounds the schema nodes one ApplyDefaults visits: "$ref"s
// and "allOf"s can fan out exponentially.
const applyBudget = 10_000

// ApplyDefaults fills properties missing from v (and from objects nested in
// it under "properties") with their schema's "default". It follows local
// "$ref"s to "#/$defs/..." and "#/definitions/...", and "allOf". It changes
// v in place, and gives up past a fixed amount of work (defaults are a
// convenience; validation still runs on the result).
func (s *Schema) ApplyDefaults(v any) { s.applyCounted(v) }

// applyCounted is ApplyDefaults, returning how many schema nodes it
// visited: what its budget bounds.
func (s *Schema) applyCounted(v any) int {
	if !s.defaults {
		return 0
	}
	budget := applyBudget
	applyDefaults(s.doc, s.doc, v, 0, &budget)
	return applyBudget - budget
}

// hasKey reports whether an object anywhere in the decoded JSON v has the
// key k.
func hasKey(v any, k string) bool {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x[k]; ok {
			return true
		}
		for _, e := range x {
			if hasKey(e, k) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasKey(e, k) {
				return true
			}
		}
	}
	return false
}

func applyDefaults(root, sch, v any, depth int, budget *int) {
	*budget--
	if depth > 32 || *budget < 0 {
		return
	}
	m, ok := sch.(map[string]any)
	if !ok {
		return
	}
	if ref, ok := m["$ref"].(string); ok {
		if target := resolveLocal(root, ref); target != nil {
			applyDefaults(root, target, v, depth+1, budget)
		}
	}
	for _, key := range []string{"allOf"} {
		if subs, ok := m[key].([]any); ok {
			for _, sub := range subs {
				applyDefaults(root, sub, v, depth+1, budget)
			}
		}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	props, ok := m["properties"].(map[string]any)
	if !ok {
		return
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ps, _ := props[name].(map[string]any)
		if ps == nil {
			continue
		}
		if _, present := obj[name]; !present {
			if d, ok := ps["default"]; ok {
				obj[name] = deepCopy(d)
			}
		}
		if child, present := obj[name]; present {
			applyDefaults(root, ps, child, depth+1, budget)
		}
	}
}

func resolveLocal(root any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	cur := root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(t))
		for k, e := range t {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(t))
		for i, e := range t {
			c[i] = deepCopy(e)
		}
		return c
	}
	return v
}
