package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/schema"
	"github.com/sandflow/sandflow/internal/wasmparse"
	"github.com/sandflow/sandflow/store"
)

// Entry kinds of a tool (spec: a workflow tool defines exactly one).
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
}

// ManifestLimits are a plugin's own limits; each must be at most the host's.
type ManifestLimits struct {
	MemoryMiB    int   `json:"memoryMiB,omitempty"`
	CPUMs        int64 `json:"cpuMs,omitempty"`
	PayloadBytes int   `json:"payloadBytes,omitempty"`
	Events       int   `json:"events,omitempty"`
	OutputBytes  int64 `json:"outputBytes,omitempty"`
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ParseManifest decodes and checks a manifest.
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
	_, _, err := m.check(DefaultLimits)
	return m, err
}

// engineName is what a manifest's engine must look like.
var engineName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// check validates the manifest against the host's limits and returns the
// compiled input schema and the plugin's limits.
func (m *Manifest) check(host Limits) (*schema.Schema, Limits, error) {
	bad := func(format string, args ...any) (*schema.Schema, Limits, error) {
		return nil, Limits{}, fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, args...))
	}
	if m.Engine != "" && !engineName.MatchString(m.Engine) {
		return bad("engine %q is not an engine name such as %s or %s", m.Engine, EngineWazero, EngineWasmtime)
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
	if len(m.OutputSchema) > 0 {
		if _, err := schema.Compile(m.OutputSchema); err != nil {
			return bad("outputSchema: %v", err)
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
			name       string
			got, max   int64
			set        func(int64)
			unit       string
			multiplier int64
		}
		for _, x := range []lim{
			{"memoryMiB", int64(ml.MemoryMiB), int64(host.MemoryBytes >> 20), func(v int64) { l.MemoryBytes = uint64(v) << 20 }, "MiB", 1},
			{"cpuMs", ml.CPUMs, host.CPUTime.Milliseconds(), func(v int64) { l.CPUTime = time.Duration(v) * time.Millisecond }, "ms", 1},
			{"payloadBytes", int64(ml.PayloadBytes), int64(host.PayloadBytes), func(v int64) { l.PayloadBytes = int(v) }, "bytes", 1},
			{"events", int64(ml.Events), int64(host.Events), func(v int64) { l.Events = int(v) }, "events", 1},
			{"outputBytes", ml.OutputBytes, host.OutputBytes, func(v int64) { l.OutputBytes = v }, "bytes", 1},
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
	return in, l, nil
}

// Plugin is a registered plugin version.
type Plugin struct {
	Name       string    `json:"name"`
	Version    int       `json:"version"`
	ModuleHash string    `json:"moduleHash"`
	Manifest   Manifest  `json:"manifest"`
	CreatedAt  time.Time `json:"createdAt"`
	Size       int       `json:"size"`
}

// AddPlugin checks a module and its manifest, compiles the module, and
// registers it as the next version of the plugin the manifest names.
//
// Checks, in order, each refusing with a *PluginError or ErrBadManifest and
// storing nothing: the size cap; the wasm header and structure; every
// import is a sandflow or WASI function; the ABI version export and the
// run and step exports are there with their types; the manifest and its
// schemas; the module compiles.
func (h *Host) AddPlugin(ctx context.Context, wasm []byte, m Manifest) (Plugin, error) {
	if h.isClosed() {
		return Plugin{}, ErrClosed
	}
	if len(wasm) > h.opts.MaxModuleBytes {
		return Plugin{}, &PluginError{Reason: "too_large", Detail: fmt.Sprintf("module of %d bytes is over the limit of %d", len(wasm), h.opts.MaxModuleBytes)}
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	_, limits, err := m.check(h.limits)
	if err != nil {
		return Plugin{}, err
	}
	eng, err := h.manifestEngine(ctx, m)
	if err != nil {
		return Plugin{}, err
	}
	se, isSource := eng.(SourceEngine)
	if !isSource {
		if err := checkModuleLimits(wasm, limits); err != nil {
			return Plugin{}, err
		}
	}
	cm, err := h.compile(ctx, eng, hash, wasm)
	if err != nil {
		return Plugin{}, err
	}
	if isSource {
		err = se.Check(ctx, cm, m, limits)
	} else {
		err = probe(ctx, cm, limits)
	}
	if err != nil {
		return Plugin{}, err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return Plugin{}, err
	}
	p, err := h.store.PutPlugin(ctx, store.Plugin{Name: m.Name, ModuleHash: hash, Manifest: raw, CreatedAt: time.Now().UTC()}, wasm)
	if err != nil {
		return Plugin{}, err
	}
	return toPlugin(p, m), nil
}

// probe instantiates a module once, as a run would, and asks its ABI
// version: a module whose initialisation traps or that was built for
// another ABI is refused at upload rather than at its first call.
func probe(ctx context.Context, cm CompiledModule, l Limits) error {
	inst, err := cm.Instantiate(ctx, InstanceConfig{
		Clock: &realClock{}, Random: rand.Reader, Stdout: io.Discard, Stderr: io.Discard,
		MemoryLimit: l.MemoryBytes, CPULimit: l.CPUTime, Ops: refuseOps{},
	})
	if err != nil {
		var pe *PluginError
		if errors.As(err, &pe) {
			return err
		}
		return &PluginError{Reason: "instantiate", Detail: err.Error()}
	}
	defer inst.Close(ctx)
	if err := checkVersion(ctx, inst); err != nil {
		var pe *PluginError
		if errors.As(err, &pe) {
			return err
		}
		return &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("calling %s: %v", abi.VersionExport, err)}
	}
	return nil
}

// refuseOps serves an instance that must not issue ops.
type refuseOps struct{}

func (refuseOps) Op(ctx context.Context, kind abi.OpKind, _, _ []byte) ([]byte, error) {
	return nil, &GuestError{Message: fmt.Sprintf("ABI violation: op %s during initialisation", kind)}
}

func toPlugin(p store.Plugin, m Manifest) Plugin {
	return Plugin{Name: p.Name, Version: p.Version, ModuleHash: p.ModuleHash, Manifest: m, CreatedAt: p.CreatedAt, Size: p.Size}
}

// allowedWASI lists the WASI preview1 functions a guest may import. The
// host serves all of them without files, sockets, arguments or environment.
var allowedWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true, "fd_advise": true, "fd_allocate": true,
	"fd_close": true, "fd_datasync": true, "fd_fdstat_get": true, "fd_fdstat_set_flags": true,
	"fd_fdstat_set_rights": true, "fd_filestat_get": true, "fd_filestat_set_size": true,
	"fd_filestat_set_times": true, "fd_pread": true, "fd_prestat_get": true, "fd_prestat_dir_name": true,
	"fd_pwrite": true, "fd_read": true, "fd_readdir": true, "fd_renumber": true, "fd_seek": true,
	"fd_sync": true, "fd_tell": true, "fd_write": true, "path_create_directory": true,
	"path_filestat_get": true, "path_filestat_set_times": true, "path_link": true, "path_open": true,
	"path_readlink": true, "path_remove_directory": true, "path_rename": true, "path_symlink": true,
	"path_unlink_file": true, "poll_oneoff": true, "proc_exit": true, "proc_raise": true,
	"sched_yield": true, "random_get": true, "sock_accept": true, "sock_recv": true, "sock_send": true,
	"sock_shutdown": true,
}

var (
	sigOp   = wasmparse.FuncType{Params: []byte{wasmparse.I32, wasmparse.I32, wasmparse.I32, wasmparse.I32, wasmparse.I32, wasmparse.I32, wasmparse.I32}, Results: []byte{wasmparse.I32}}
	sigRead = wasmparse.FuncType{Params: []byte{wasmparse.I32, wasmparse.I32}, Results: []byte{wasmparse.I32}}
	sigI32  = wasmparse.FuncType{Results: []byte{wasmparse.I32}}
	sigVoid = wasmparse.FuncType{}
)

func sameSig(a *wasmparse.FuncType, b wasmparse.FuncType) bool {
	return a != nil && bytes.Equal(a.Params, b.Params) && bytes.Equal(a.Results, b.Results)
}

func sigString(t *wasmparse.FuncType) string {
	if t == nil {
		return "not a function"
	}
	name := map[byte]string{wasmparse.I32: "i32", wasmparse.I64: "i64", wasmparse.F32: "f32", wasmparse.F64: "f64"}
	f := func(b []byte) string {
		s := "("
		for i, c := range b {
			if i > 0 {
				s += ", "
			}
			if n, ok := name[c]; ok {
				s += n
			} else {
				s += fmt.Sprintf("%#x", c)
			}
		}
		return s + ")"
	}
	return f(t.Params) + " -> " + f(t.Results)
}

// CheckModule checks a module's structure, imports and exports against
// the ABI without compiling it.
func CheckModule(wasm []byte) error {
	_, err := checkModule(wasm)
	return err
}

// checkModuleLimits checks a module and that its initial memory fits l.
func checkModuleLimits(wasm []byte, l Limits) error {
	mod, err := checkModule(wasm)
	if err != nil {
		return err
	}
	if need := uint64(mod.MemoryMinPages) << 16; need > l.MemoryBytes {
		return &PluginError{Reason: "memory", Detail: fmt.Sprintf("the module starts with %d bytes of memory, over the limit of %d", need, l.MemoryBytes)}
	}
	return nil
}

func checkModule(wasm []byte) (*wasmparse.Module, error) {
	mod, err := wasmparse.Parse(wasm)
	if err != nil {
		if errors.Is(err, wasmparse.ErrNotWasm) {
			return nil, &PluginError{Reason: "not_wasm", Detail: "the bytes are not a WebAssembly module (no \\0asm header)"}
		}
		var le *wasmparse.LimitError
		if errors.As(err, &le) {
			return nil, &PluginError{Reason: "module_limit", Detail: err.Error(), Err: err}
		}
		return nil, &PluginError{Reason: "malformed", Detail: err.Error()}
	}
	for _, imp := range mod.Imports {
		what := fmt.Sprintf("%s.%s", imp.Module, imp.Name)
		if imp.Kind != wasmparse.KindFunc {
			return nil, &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a function; a guest may import only functions of %s and %s", what, abi.ImportModule, abi.WASIModule)}
		}
		switch imp.Module {
		case abi.ImportModule:
			want := map[string]wasmparse.FuncType{abi.FuncOp: sigOp, abi.FuncRead: sigRead}
			sig, ok := want[imp.Name]
			if !ok {
				return nil, &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a function of the sandflow ABI version %d", what, abi.Version)}
			}
			if !sameSig(imp.Type, sig) {
				return nil, &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s has type %s, the ABI says %s", what, sigString(imp.Type), sigString(&sig))}
			}
		case abi.WASIModule:
			if !allowedWASI[imp.Name] {
				return nil, &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a WASI preview1 function this host provides", what)}
			}
		default:
			return nil, &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not allowed: a guest may import only from %s and %s", what, abi.ImportModule, abi.WASIModule)}
		}
	}
	if e, ok := mod.Export(abi.VersionExport); !ok {
		return nil, &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("module does not export %s, so it was not built for the sandflow ABI", abi.VersionExport)}
	} else if !sameSig(e.Type, sigI32) {
		return nil, &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("export %s has type %s, want () -> (i32)", abi.VersionExport, sigString(e.Type))}
	}
	for _, name := range []string{abi.RunExport, abi.StepExport} {
		e, ok := mod.Export(name)
		if !ok {
			return nil, &PluginError{Reason: "missing_export", Detail: "module does not export " + name}
		}
		if !sameSig(e.Type, sigI32) {
			return nil, &PluginError{Reason: "missing_export", Detail: fmt.Sprintf("export %s has type %s, want () -> (i32)", name, sigString(e.Type))}
		}
	}
	if _, ok := mod.Export(abi.CommandExport); ok {
		// A command's toolchain runs its constructors in _start, which the
		// host never calls, or around every export call (wasm-ld wraps a
		// command's exports so), which would reset the workflow's state at
		// each sandflow_run.
		return nil, &PluginError{Reason: "not_reactor", Detail: fmt.Sprintf("module exports %s, so it is a WASI command; a guest must be a reactor (clang -mexec-model=reactor, Go -buildmode=c-shared, a Rust cdylib)", abi.CommandExport)}
	}
	if e, ok := mod.Export(abi.InitializeExport); ok && !sameSig(e.Type, sigVoid) {
		return nil, &PluginError{Reason: "not_reactor", Detail: fmt.Sprintf("export %s has type %s, want () -> ()", abi.InitializeExport, sigString(e.Type))}
	}
	if e, ok := mod.Export(abi.PrepareExport); ok && !sameSig(e.Type, sigVoid) {
		return nil, &PluginError{Reason: "missing_export", Detail: fmt.Sprintf("export %s has type %s, want () -> ()", abi.PrepareExport, sigString(e.Type))}
	}
	if e, ok := mod.Export(abi.MemoryExport); !ok || e.Kind != wasmparse.KindMemory {
		return nil, &PluginError{Reason: "missing_export", Detail: "module does not export its memory as \"memory\""}
	}
	return mod, nil
}

// loadedPlugin is a plugin version ready to run: compiled module, input
// schema, limits, and a pool of step instances.
type loadedPlugin struct {
	p      store.Plugin
	m      Manifest
	limits Limits
	cm     CompiledModule
	input  *schema.Schema
	// output is the manifest's outputSchema compiled, nil without one: a
	// run's result must match it (workflow.go, OpComplete).
	output *schema.Schema
	caps   map[string]bool

	mu    sync.Mutex
	steps []*stepInstance
	// fresh are pre-initialised workflow instances (preinit.go); filling:
	// a goroutine is making more; closed: the version is gone.
	fresh   []freshInstance
	filling bool
	// resetting: finished instances being reset for fresh (recycle.go);
	// resetDone, when set, is closed when the next of them is done.
	resetting int
	resetDone chan struct{}
	closed    bool
	// base is the memory snapshots are diffs against (snapshot.go).
	base baseImage
}

// maxIdleSteps is how many idle step instances a plugin version keeps.
const maxIdleSteps = 4

func (lp *loadedPlugin) allows(capability string) bool { return lp.caps[capability] }

func (lp *loadedPlugin) takeStepInstance() *stepInstance {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if n := len(lp.steps); n > 0 {
		s := lp.steps[n-1]
		lp.steps = lp.steps[:n-1]
		return s
	}
	return nil
}

func (lp *loadedPlugin) putStepInstance(ctx context.Context, s *stepInstance) {
	lp.mu.Lock()
	if len(lp.steps) < maxIdleSteps {
		lp.steps = append(lp.steps, s)
		s = nil
	}
	lp.mu.Unlock()
	if s != nil {
		s.inst.Close(ctx)
	}
}

func (lp *loadedPlugin) closeSteps(ctx context.Context) {
	lp.mu.Lock()
	steps := lp.steps
	lp.steps = nil
	lp.mu.Unlock()
	for _, s := range steps {
		s.inst.Close(ctx)
	}
}

// checkInput validates a tool input and fills its defaults.
func (lp *loadedPlugin) checkInput(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if len(raw) > lp.limits.PayloadBytes {
		return nil, &LimitError{Limit: "payload", Max: int64(lp.limits.PayloadBytes), What: "tool input"}
	}
	v, err := schema.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrBadInput, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: a tool input must be a JSON object", ErrBadInput)
	}
	lp.input.ApplyDefaults(v)
	if problems := lp.input.Validate(v); problems != nil {
		return nil, &InputError{Tool: lp.m.Name, Problems: problems}
	}
	return schema.Encode(v)
}

// plugin returns a plugin version ready to run; version 0 is the latest.
func (h *Host) plugin(ctx context.Context, name string, version int) (*loadedPlugin, error) {
	if version > 0 {
		// A version loaded here is what the store holds: this host owns
		// the store, and deleting a version unloads it.
		h.mu.Lock()
		lp := h.plugins[fmt.Sprintf("%s@%d", name, version)]
		h.mu.Unlock()
		if lp != nil {
			return lp, nil
		}
	}
	p, err := h.store.Plugin(ctx, name, version)
	if err != nil {
		if errors.Is(err, store.ErrPluginNotFound) {
			if version > 0 {
				return nil, fmt.Errorf("%w: %s version %d", ErrUnknownTool, name, version)
			}
			return nil, fmt.Errorf("%w: %s", ErrUnknownTool, name)
		}
		return nil, err
	}
	key := fmt.Sprintf("%s@%d", p.Name, p.Version)
	h.mu.Lock()
	lp := h.plugins[key]
	h.mu.Unlock()
	if lp != nil {
		return lp, nil
	}
	var m Manifest
	if err := json.Unmarshal(p.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%w: stored manifest of %s: %v", ErrBadManifest, key, err)
	}
	in, limits, err := m.check(h.limits)
	if err != nil {
		return nil, err
	}
	eng, err := h.manifestEngine(ctx, m)
	if err != nil {
		return nil, err
	}
	cm, err := h.compiledByHash(ctx, eng, p.ModuleHash)
	if err != nil {
		return nil, err
	}
	caps := map[string]bool{}
	for _, c := range m.Capabilities {
		caps[c] = true
	}
	var out *schema.Schema
	if len(m.OutputSchema) > 0 {
		if out, err = schema.Compile(m.OutputSchema); err != nil { // check compiled it already
			return nil, fmt.Errorf("%w: outputSchema: %v", ErrBadManifest, err)
		}
	}
	lp = &loadedPlugin{p: p, m: m, limits: limits, cm: cm, input: in, output: out, caps: caps}
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev := h.plugins[key]; prev != nil {
		return prev, nil
	}
	h.plugins[key] = lp
	return lp, nil
}

// manifestEngine returns the engine a manifest asks for, or the default.
func (h *Host) manifestEngine(ctx context.Context, m Manifest) (Engine, error) {
	if m.Engine == "" {
		return h.engine, nil
	}
	e, err := h.engineFor(ctx, m.Engine)
	if err != nil {
		return nil, fmt.Errorf("%w: engine %s is not available on this host: %v", ErrBadManifest, m.Engine, err)
	}
	return e, nil
}

func (h *Host) compiledByHash(ctx context.Context, eng Engine, hash string) (CompiledModule, error) {
	h.mu.Lock()
	cm := h.compiled[engineKind(eng)+":"+hash]
	h.mu.Unlock()
	if cm != nil {
		return cm, nil
	}
	wasm, err := h.store.Module(ctx, hash)
	if err != nil {
		return nil, err
	}
	return h.compile(ctx, eng, hash, wasm)
}

// Tool is what a model sees of a tool.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Entry       string          `json:"entry"`
	Version     int             `json:"version"`
}

// Tools lists the latest version of every plugin as a tool, by name.
func (h *Host) Tools(ctx context.Context) ([]Tool, error) {
	ps, err := h.Plugins(ctx)
	if err != nil {
		return nil, err
	}
	latest := map[string]Plugin{}
	for _, p := range ps {
		if p.Version > latest[p.Name].Version {
			latest[p.Name] = p
		}
	}
	var out []Tool
	for _, p := range latest {
		out = append(out, Tool{Name: p.Manifest.Name, Description: p.Manifest.Description, InputSchema: p.Manifest.InputSchema, Entry: p.Manifest.Entry, Version: p.Version})
	}
	slices.SortFunc(out, func(a, b Tool) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// DeletePluginVersion removes a plugin version no unfinished run uses.
// Errors: ErrUnknownTool when there is no such version; ErrPluginInUse.
func (h *Host) DeletePluginVersion(ctx context.Context, name string, version int) error {
	err := h.store.DeletePluginVersion(ctx, name, version)
	switch {
	case errors.Is(err, store.ErrPluginNotFound):
		return fmt.Errorf("%w: %s version %d", ErrUnknownTool, name, version)
	case errors.Is(err, store.ErrPluginInUse):
		// The store's error says what the host's does, after its prefix.
		return fmt.Errorf("%w: %s", ErrPluginInUse, strings.TrimPrefix(err.Error(), store.ErrPluginInUse.Error()+": "))
	case err != nil:
		return err
	}
	h.mu.Lock()
	if lp := h.plugins[fmt.Sprintf("%s@%d", name, version)]; lp != nil {
		delete(h.plugins, fmt.Sprintf("%s@%d", name, version))
		defer lp.closeSteps(ctx)
		defer lp.closeFresh(ctx)
	}
	h.mu.Unlock()
	return nil
}

// Plugins lists every registered plugin version.
func (h *Host) Plugins(ctx context.Context) ([]Plugin, error) {
	ps, err := h.store.Plugins(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Plugin, 0, len(ps))
	for _, p := range ps {
		var m Manifest
		if err := json.Unmarshal(p.Manifest, &m); err != nil {
			return nil, fmt.Errorf("%w: stored manifest of %s@%d: %v", ErrBadManifest, p.Name, p.Version, err)
		}
		out = append(out, toPlugin(p, m))
	}
	return out, nil
}
