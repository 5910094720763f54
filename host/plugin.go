package host

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/schema"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// Entry kinds of a tool (plugins.EntryExecute and so on).
const (
	EntryExecute = plugins.EntryExecute
	EntryTask    = plugins.EntryTask
	EntryServe   = plugins.EntryServe
)

// Manifest describes a plugin: the tool it provides and what it may use.
//
// Deprecated: the type is plugins.Manifest; this name stays for one
// release.
type Manifest = plugins.Manifest

// ManifestLimits are a plugin's own limits; each must be at most the host's.
//
// Deprecated: the type is plugins.ManifestLimits; this name stays for one
// release.
type ManifestLimits = plugins.ManifestLimits

// Plugin is a registered plugin version.
//
// Deprecated: the type is plugins.Plugin; this name stays for one release.
type Plugin = plugins.Plugin

// ParseManifest decodes and checks a manifest.
//
// Deprecated: use plugins.ParseManifest.
func ParseManifest(raw []byte) (Manifest, error) { return plugins.ParseManifest(raw) }

// CheckModule checks a module's structure, imports and exports against
// the ABI without compiling it.
//
// Deprecated: use plugins.CheckModule.
func CheckModule(wasm []byte) error { return plugins.CheckModule(wasm) }

// AddPlugin checks a module and its manifest, compiles the module, and
// registers it as the next version of the plugin the manifest names.
//
// Checks, in order, each refusing with a *PluginError or ErrBadManifest and
// storing nothing: the size cap; the manifest and its schemas against the
// host's limits (plugins.Manifest.Check); the engine it names; for a
// WebAssembly engine the module's header, structure, imports and exports
// (plugins.CheckModuleLimits); the module compiles; and an instance of it
// initialises and answers the ABI version (or, on a source engine such as
// goja, the engine's own check).
func (h *Host) AddPlugin(ctx context.Context, wasm []byte, m Manifest) (Plugin, error) {
	if h.isClosed() {
		return Plugin{}, ErrClosed
	}
	if len(wasm) > h.opts.MaxModuleBytes {
		return Plugin{}, &PluginError{Reason: "too_large", Detail: fmt.Sprintf("module of %d bytes is over the limit of %d", len(wasm), h.opts.MaxModuleBytes)}
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	checked, err := m.Check(h.limits)
	if err != nil {
		return Plugin{}, err
	}
	limits := checked.Limits
	eng, err := h.manifestEngine(ctx, m)
	if err != nil {
		return Plugin{}, err
	}
	se, isSource := eng.(SourceEngine)
	if !isSource {
		if err := plugins.CheckModuleLimits(wasm, limits); err != nil {
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
		err = probe(ctx, cm, limits, m.Name, plugins.Describes(wasm))
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
// another ABI is refused at upload rather than at its first call. A module
// that describes itself (describes: it exports abi.DescribeExport) is
// asked which tool it is, and refused when that is not the manifest's.
func probe(ctx context.Context, cm CompiledModule, l Limits, name string, describes bool) error {
	ops := &probeOps{}
	inst, err := cm.Instantiate(ctx, InstanceConfig{
		Clock: &realClock{}, Random: rand.Reader, Stdout: io.Discard, Stderr: io.Discard,
		MemoryLimit: l.MemoryBytes, CPULimit: l.CPUTime, Ops: ops,
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
	if !describes {
		return nil
	}
	ops.describing = true
	if _, err := inst.Call(ctx, abi.DescribeExport); err != nil {
		var pe *PluginError
		if errors.As(err, &pe) {
			return err
		}
		return &PluginError{Reason: "instantiate", Detail: fmt.Sprintf("calling %s: %v", abi.DescribeExport, err)}
	}
	if d := ops.desc; d != nil && d.Name != "" && d.Name != name {
		return &PluginError{Reason: "manifest_mismatch", Detail: fmt.Sprintf("the module says it is the tool %q, but its manifest names %q: is this the manifest of another tool?", d.Name, name)}
	}
	return nil
}

// probeOps serves the probe's instance: no op during initialisation, and
// one OpDescribe while describing.
type probeOps struct {
	describing bool
	desc       *abi.Description
}

func (p *probeOps) Op(ctx context.Context, kind abi.OpKind, _, payload []byte) ([]byte, error) {
	if kind != abi.OpDescribe || !p.describing {
		return nil, &GuestError{Message: fmt.Sprintf("ABI violation: op %s during initialisation", kind)}
	}
	if p.desc != nil {
		return nil, &GuestError{Message: "ABI violation: a second describe op"}
	}
	var d abi.Description
	if err := json.Unmarshal(payload, &d); err != nil {
		return nil, &PluginError{Reason: "manifest_mismatch", Detail: fmt.Sprintf("the module's description is not a JSON object: %v", err)}
	}
	p.desc = &d
	return appendHeader(nil, abi.StatusOK, 0), nil
}

func toPlugin(p store.Plugin, m Manifest) Plugin {
	return Plugin{Name: p.Name, Version: p.Version, ModuleHash: p.ModuleHash, Manifest: m, CreatedAt: p.CreatedAt, Size: p.Size}
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
		// A version loaded here is what the store holds for the runs
		// pinned to it: a version in use cannot be deleted. New runs
		// check the store first (pluginToStart).
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
	checked, err := m.Check(h.limits)
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
	lp = &loadedPlugin{p: p, m: m, limits: checked.Limits, cm: cm, input: checked.Input, output: checked.Output, caps: caps}
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
	h.unloadPlugin(ctx, name, version)
	return nil
}

// unloadPlugin forgets a loaded plugin version and closes its instances.
func (h *Host) unloadPlugin(ctx context.Context, name string, version int) {
	key := fmt.Sprintf("%s@%d", name, version)
	h.mu.Lock()
	lp := h.plugins[key]
	delete(h.plugins, key)
	h.mu.Unlock()
	if lp != nil {
		lp.closeFresh(ctx)
		lp.closeSteps(ctx)
	}
}

// pluginToStart is plugin for a new run or an upgrade. A version asked
// for by number is looked up in the store even when it is loaded here:
// on a store several hosts share, another host may have deleted it, and
// a run must not start on a version the store no longer has. (A run
// already pinned to a version needs no look-up: a version in use cannot
// be deleted.)
func (h *Host) pluginToStart(ctx context.Context, name string, version int) (*loadedPlugin, error) {
	if version > 0 {
		if _, err := h.store.Plugin(ctx, name, version); errors.Is(err, store.ErrPluginNotFound) {
			h.unloadPlugin(ctx, name, version)
			return nil, fmt.Errorf("%w: %s version %d", ErrUnknownTool, name, version)
		} else if err != nil {
			return nil, err
		}
	}
	return h.plugin(ctx, name, version)
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
