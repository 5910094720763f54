package plugins_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/plugins"
)

func TestParseManifest(t *testing.T) {
	good := map[string]any{
		"name": "deploy", "description": "Deploy a service.", "entry": "task",
		"inputSchema":  map[string]any{"type": "object", "properties": map[string]any{"service": map[string]any{"type": "string"}}},
		"outputSchema": map[string]any{"type": "object"},
		"capabilities": []string{"http.fetch", "count"}, "httpAllow": []string{"api.example.com", "*.example.org"},
		"limits": map[string]any{"memoryMiB": 64, "cpuMs": 500}, "engine": "wasmtime",
	}
	with := func(key string, v any) string {
		m := map[string]any{}
		for k, x := range good {
			m[k] = x
		}
		if v == nil {
			delete(m, key)
		} else {
			m[key] = v
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	nested := strings.Repeat(`{"not":`, 20000) + `{}` + strings.Repeat(`}`, 20000)
	for _, tc := range []struct {
		name, raw string
		ok        bool
	}{
		{"good", with("name", "deploy"), true},
		{"minimal", goodManifest, true},
		{"serve", with("entry", "serve"), true},
		{"no engine", with("engine", nil), true},
		{"huge description", with("description", strings.Repeat("x", 4<<20)), true},
		{"many capabilities", with("capabilities", append(make([]string, 0), strings.Split(strings.Repeat("c,", 10000)+"http.fetch", ",")...)), true},

		{"empty", "", false},
		{"blank", "  \n", false},
		{"not JSON", "name: deploy", false},
		{"an array", `[]`, false},
		{"null", `null`, false},
		{"truncated", goodManifest[:len(goodManifest)-1], false},
		{"data after the object", goodManifest + ` {}`, false},
		{"unknown field", with("entrypoint", "run"), false},
		{"name missing", with("name", nil), false},
		{"name with spaces", with("name", "no spaces allowed"), false},
		{"name too long", with("name", strings.Repeat("a", 65)), false},
		{"name starting with -", with("name", "-x"), false},
		{"name not a string", with("name", 5), false},
		{"entry missing", with("entry", nil), false},
		{"entry unknown", with("entry", "stream"), false},
		{"engine not a name", with("engine", "Wasm Time"), false},
		{"inputSchema missing", with("inputSchema", nil), false},
		{"inputSchema not an object's", with("inputSchema", map[string]any{"type": "string"}), false},
		{"inputSchema bad keyword", with("inputSchema", map[string]any{"type": "object", "minProperties": "x"}), false},
		{"inputSchema remote ref", with("inputSchema", map[string]any{"type": "object", "$ref": "file:///etc/passwd"}), false},
		{"inputSchema nested past the decoder's depth", `{"name":"x","entry":"execute","inputSchema":` + nested + `}`, false},
		{"outputSchema bad", with("outputSchema", map[string]any{"type": 5}), false},
		{"capability empty", with("capabilities", []string{"http.fetch", ""}), false},
		{"httpAllow without http.fetch", with("capabilities", []string{"count"}), false},
		{"httpAllow with a URL", with("httpAllow", []string{"https://api.example.com"}), false},
		{"httpAllow with a star inside", with("httpAllow", []string{"api.*.com"}), false},
		{"httpAllow empty name", with("httpAllow", []string{""}), false},
		{"limit negative", with("limits", map[string]any{"events": -1}), false},
		{"limit over the host's", with("limits", map[string]any{"memoryMiB": 1 << 20}), false},
		{"limit not a number", with("limits", map[string]any{"cpuMs": "fast"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := plugins.ParseManifest([]byte(tc.raw))
			if tc.ok {
				if err != nil {
					t.Fatalf("ParseManifest: %v", err)
				}
				if m.Name == "" || m.Entry == "" {
					t.Errorf("decoded %+v", m)
				}
				return
			}
			if !errors.Is(err, plugins.ErrBadManifest) {
				t.Fatalf("got %v, want ErrBadManifest", err)
			}
		})
	}
}

func TestCheckServeTaskID(t *testing.T) {
	m := plugins.Manifest{Name: "s", Entry: plugins.EntryServe, InputSchema: json.RawMessage(`{"type":"object","properties":{"taskId":{"type":"string"}}}`)}
	if _, err := m.Check(plugins.DefaultLimits); !errors.Is(err, plugins.ErrBadManifest) || !strings.Contains(err.Error(), "taskId") {
		t.Fatalf("got %v, want ErrBadManifest about taskId", err)
	}
	m.Entry = plugins.EntryExecute // only a serve tool's input gets taskId from the host
	if _, err := m.Check(plugins.DefaultLimits); err != nil {
		t.Fatalf("execute tool with a taskId input: %v", err)
	}
}

// TestCheckTightensLimits: a manifest's limits replace the host's where
// set, and may equal but not pass them.
func TestCheckTightensLimits(t *testing.T) {
	host := plugins.Limits{MemoryBytes: 128 << 20, CPUTime: time.Second, PayloadBytes: 1000, Events: 50, OutputBytes: 100}
	m := plugins.Manifest{Name: "t", Entry: plugins.EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"integer"}`),
		Limits:       &plugins.ManifestLimits{MemoryMiB: 64, CPUMs: 1000, Events: 10}}
	c, err := m.Check(host)
	if err != nil {
		t.Fatal(err)
	}
	want := plugins.Limits{MemoryBytes: 64 << 20, CPUTime: time.Second, PayloadBytes: 1000, Events: 10, OutputBytes: 100}
	if c.Limits != want {
		t.Errorf("limits %+v, want %+v", c.Limits, want)
	}
	if c.Input == nil || c.Output == nil {
		t.Fatalf("schemas not compiled: %+v", c)
	}
	if problems := c.Output.Validate("x"); problems == nil {
		t.Errorf("the output schema accepts a string")
	}
	for name, ml := range map[string]plugins.ManifestLimits{
		"memory": {MemoryMiB: 129}, "cpu": {CPUMs: 1001}, "payload": {PayloadBytes: 1001},
		"events": {Events: 51}, "output": {OutputBytes: 101}, "negative": {OutputBytes: -1},
	} {
		m.Limits = &ml
		if _, err := m.Check(host); !errors.Is(err, plugins.ErrBadManifest) {
			t.Errorf("%s: got %v, want ErrBadManifest", name, err)
		}
	}
	m.Limits, m.OutputSchema = nil, nil
	if c, err := m.Check(host); err != nil || c.Limits != host || c.Output != nil {
		t.Errorf("no limits: %+v, %v; want the host's and no output schema", c, err)
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	got := plugins.Limits{Events: 7}.WithDefaults(plugins.DefaultLimits)
	want := plugins.DefaultLimits
	want.Events = 7
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestPluginErrorMatches(t *testing.T) {
	for _, tc := range []struct {
		err         *plugins.PluginError
		badPlugin   bool
		compileTime bool
	}{
		{&plugins.PluginError{Reason: "not_wasm"}, true, false},
		{&plugins.PluginError{Reason: "compile_timeout"}, true, true},
	} {
		var err error = tc.err
		if errors.Is(err, plugins.ErrBadPlugin) != tc.badPlugin || errors.Is(err, plugins.ErrCompileTimeout) != tc.compileTime || errors.Is(err, plugins.ErrBadManifest) {
			t.Errorf("%v matches the wrong sentinels", err)
		}
	}
	cause := errors.New("cause")
	if err := error(&plugins.PluginError{Reason: "module_limit", Err: cause}); !errors.Is(err, cause) {
		t.Errorf("%v does not unwrap to its cause", err)
	}
}
