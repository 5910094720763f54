package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/schema"
)

// Entry kinds of a tool: a tool defines exactly one.
const (
	EntryExecute = "execute"
	EntryTask    = "task"
	EntryServe   = "serve"
)

// Manifest describes a plugin: the tool it provides and what it may use.
type Manifest struct {
	// Name is the tool's name: 1-64 letters, digits, '_' and '-'.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Entry is "execute" (the caller waits for the result) or "task" (the
	// caller gets a receipt and the result later).
	Entry string `json:"entry"`
	// InputSchema is the JSON Schema (2020-12 by default) of the input,
	// which must be an object.
	InputSchema json.RawMessage `json:"inputSchema"`
	// OutputSchema optionally describes the result: a run whose body
	// completes with a result that does not match it fails with an
	// OutputSchemaError instead. It does not apply to a serve tool's
	// reply outputs, nor to a run's error.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Capabilities lists the host capabilities the plugin's steps may call.
	Capabilities []string `json:"capabilities,omitempty"`
	// HTTPAllow lists the hosts the built-in http.fetch capability may
	// reach: names, or "*.example.com" for subdomains.
	HTTPAllow []string `json:"httpAllow,omitempty"`
	// Limits tighten the host's limits for this plugin.
	Limits *ManifestLimits `json:"limits,omitempty"`
	// Engine picks the WebAssembly engine, "wazero" or "wasmtime"; empty
	// means the host's default.
	Engine string `json:"engine,omitempty"`
	// Approval is whether a loop agent asks a person before it calls the
	// tool (package agents); an agents file that sets the tool's approval
	// or approvalRules overrides it.
	Approval *ManifestApproval `json:"approval,omitempty"`
}

// ManifestApproval is a tool's approval for the loop agents that call
// it: Policy never (the default), always (ask before each call) or once
// (before the first call in a session), and Rules that decide the policy
// from a call's input, the first that matches.
type ManifestApproval struct {
	Policy string         `json:"policy,omitempty"`
	Rules  []ApprovalRule `json:"rules,omitempty"`
}

// ApprovalRule decides a call's approval policy from its input: when
// the argument Field (a top-level property) matches Match (RE2, against
// the value's text; a string's without quotes), the policy is Approval.
type ApprovalRule struct {
	Field    string `json:"field"`
	Match    string `json:"match"`
	Approval string `json:"approval"`
}

func approvalPolicy(p string) bool { return p == "" || p == "never" || p == "always" || p == "once" }

// check says what is wrong with the approval ("" when nothing is).
func (a *ManifestApproval) check() string {
	if !approvalPolicy(a.Policy) {
		return fmt.Sprintf("approval.policy %q is not never, always or once", a.Policy)
	}
	for i, r := range a.Rules {
		if r.Field == "" || r.Approval == "" || !approvalPolicy(r.Approval) {
			return fmt.Sprintf("approval.rules[%d] needs a field and an approval of never, always or once", i)
		}
		if _, err := regexp.Compile(r.Match); err != nil {
			return fmt.Sprintf("approval.rules[%d].match: %v", i, err)
		}
	}
	return ""
}

// ManifestLimits are a plugin's own limits; each must be at most the host's.
type ManifestLimits struct {
	MemoryMiB    int   `json:"memoryMiB,omitempty"`
	CPUMs        int64 `json:"cpuMs,omitempty"`
	PayloadBytes int   `json:"payloadBytes,omitempty"`
	Events       int   `json:"events,omitempty"`
	OutputBytes  int64 `json:"outputBytes,omitempty"`
}

var (
	toolName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	engineName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// ParseManifest decodes a manifest, refusing unknown fields and data after
// the object, and checks it against DefaultLimits. Errors match
// ErrBadManifest.
func ParseManifest(raw []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, fmt.Errorf("%w: data after the manifest object", ErrBadManifest)
	}
	_, err := m.Check(DefaultLimits)
	return m, err
}

// Checked is what Check makes of a valid manifest: what the host needs to
// run its plugin.
type Checked struct {
	// Input is the compiled input schema.
	Input *schema.Schema
	// Output is the compiled output schema; nil when the manifest has none.
	Output *schema.Schema
	// Limits are the host's limits tightened by the manifest's.
	Limits Limits
}

// Check validates the manifest against a host's limits: its name, entry
// and engine name, its schemas (compiled; the input's must be an object's),
// capabilities and HTTP allowlist, and that each of its limits is at most
// the host's. Errors match ErrBadManifest and say which field is wrong.
func (m *Manifest) Check(host Limits) (Checked, error) {
	bad := func(format string, args ...any) (Checked, error) {
		return Checked{}, fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, args...))
	}
	if m.Engine != "" && !engineName.MatchString(m.Engine) {
		return bad("engine %q is not an engine name such as wazero or wasmtime", m.Engine)
	}
	if !toolName.MatchString(m.Name) {
		return bad("name %q must be 1-64 letters, digits, '_' or '-', starting with a letter or digit", m.Name)
	}
	switch m.Entry {
	case EntryExecute, EntryTask, EntryServe:
	case "":
		return bad("entry is required: execute, task or serve")
	default:
		return bad("entry %q is not execute, task or serve", m.Entry)
	}
	if len(m.InputSchema) == 0 {
		return bad("inputSchema is required")
	}
	in, err := schema.Compile(m.InputSchema)
	if err != nil {
		return bad("inputSchema: %v", err)
	}
	if !in.IsObjectSchema() {
		return bad(`inputSchema must have "type": "object": a tool's input is a JSON object`)
	}
	if m.Entry == EntryServe {
		var props struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(m.InputSchema, &props) == nil && props.Properties["taskId"] != nil {
			return bad("inputSchema declares taskId, which the host adds to a %s tool's input to route calls to its tasks", m.Entry)
		}
	}
	var out *schema.Schema
	if len(m.OutputSchema) > 0 {
		if out, err = schema.Compile(m.OutputSchema); err != nil {
			return bad("outputSchema: %v", err)
		}
	}
	if m.Approval != nil {
		if why := m.Approval.check(); why != "" {
			return bad("%s", why)
		}
	}
	for _, c := range m.Capabilities {
		if c == "" {
			return bad("capabilities: empty name")
		}
	}
	for _, a := range m.HTTPAllow {
		if a == "" || strings.ContainsAny(a, "/:@ ") || strings.Contains(a[min(len(a), 1):], "*") {
			return bad("httpAllow: %q is not a host name or *.domain", a)
		}
	}
	if len(m.HTTPAllow) > 0 && !slices.Contains(m.Capabilities, abi.CapabilityFetch) {
		return bad("httpAllow is set, but capabilities does not list %s", abi.CapabilityFetch)
	}
	l := host
	if ml := m.Limits; ml != nil {
		type lim struct {
			name     string
			got, max int64
			set      func(int64)
			unit     string
		}
		for _, x := range []lim{
			{"memoryMiB", int64(ml.MemoryMiB), int64(host.MemoryBytes >> 20), func(v int64) { l.MemoryBytes = uint64(v) << 20 }, "MiB"},
			{"cpuMs", ml.CPUMs, host.CPUTime.Milliseconds(), func(v int64) { l.CPUTime = time.Duration(v) * time.Millisecond }, "ms"},
			{"payloadBytes", int64(ml.PayloadBytes), int64(host.PayloadBytes), func(v int64) { l.PayloadBytes = int(v) }, "bytes"},
			{"events", int64(ml.Events), int64(host.Events), func(v int64) { l.Events = int(v) }, "events"},
			{"outputBytes", ml.OutputBytes, host.OutputBytes, func(v int64) { l.OutputBytes = v }, "bytes"},
		} {
			switch {
			case x.got == 0:
			case x.got < 0:
				return bad("limits.%s must be positive", x.name)
			case x.got > x.max:
				return bad("limits.%s of %d %s is over this host's limit of %d", x.name, x.got, x.unit, x.max)
			default:
				x.set(x.got)
			}
		}
	}
	return Checked{Input: in, Output: out, Limits: l}, nil
}

// Plugin is a registered plugin version: the manifest it was added with
// and the module it runs, by hash. A run stays pinned to the version that
// started it.
type Plugin struct {
	Name       string    `json:"name"`
	Version    int       `json:"version"`
	ModuleHash string    `json:"moduleHash"`
	Manifest   Manifest  `json:"manifest"`
	CreatedAt  time.Time `json:"createdAt"`
	Size       int       `json:"size"`
}
