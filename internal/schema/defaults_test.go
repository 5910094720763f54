package schema

import "testing"

// Defaults fill omitted properties, directly and through a local $ref;
// a schema with no default anywhere leaves the input as it is (and skips
// the walk).
func TestApplyDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, schema, input, want string
		defaults                  bool
	}{
		{"property", `{"type":"object","properties":{"n":{"type":"integer","default":3},"s":{"type":"string"}}}`,
			`{"s":"x"}`, `{"n":3,"s":"x"}`, true},
		{"given", `{"type":"object","properties":{"n":{"type":"integer","default":3}}}`, `{"n":5}`, `{"n":5}`, true},
		{"ref", `{"$defs":{"o":{"type":"object","properties":{"m":{"default":"d"}}}},"type":"object","properties":{"o":{"$ref":"#/$defs/o"}}}`,
			`{"o":{}}`, `{"o":{"m":"d"}}`, true},
		{"none", `{"type":"object","properties":{"n":{"type":"integer"},"d":{"const":"default"}}}`, `{"x":1}`, `{"x":1}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			if s.defaults != tc.defaults {
				t.Errorf("defaults %v, want %v", s.defaults, tc.defaults)
			}
			v, err := Decode([]byte(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			s.ApplyDefaults(v)
			got, err := Encode(v)
			if err != nil || string(got) != tc.want {
				t.Fatalf("with defaults: %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}
