package jsprogram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/plugins"
)

// An authored tool is a script that calls defineWorkflowTool once:
//
//	defineWorkflowTool({
//	  description: "Deploy a service to production.",
//	  inputSchema: { type: "object", properties: { service: { type: "string" } }, required: ["service"] },
//	  async execute({ service }, ctx) {
//	    "use workflow";
//	    const plan = await planDeploy(service);
//	    ...
//	  },
//	});
//
//	async function planDeploy(service) {
//	  "use step";
//	  ...
//	}
//
// The script is the plugin's module (engine goja); its manifest comes from
// the definition (Definition.Manifest). Every start or resume of a run
// loads the script in a worker and runs the entry point from the top
// against the run's log; each call of a "use step" function is a step op,
// and the step runs in a step attempt, also in a worker.

// compileScript accepts a script as a module.
func (e *Engine) compileScript(module []byte) (host.CompiledModule, error) {
	if len(module) > e.lim.ScriptBytes {
		return nil, &host.PluginError{Reason: "too_large", Detail: fmt.Sprintf("the script is %d bytes; the limit is %d bytes", len(module), e.lim.ScriptBytes)}
	}
	if len(bytes.TrimSpace(module)) == 0 {
		return nil, &host.PluginError{Reason: "bad_program", Detail: "the script is empty"}
	}
	if !utf8.Valid(module) {
		return nil, &host.PluginError{Reason: "bad_program", Detail: "the script is not UTF-8 text"}
	}
	return &compiled{e: e, lim: e.lim, source: string(module)}, nil
}

// DefineTool reads the tool a script defines. It runs the script's top
// level in a worker, within the JavaScript time limit; a script that does
// not parse, throws, or defines no tool is refused with a
// *host.PluginError (reason bad_program) that says why and where.
func (e *Engine) DefineTool(ctx context.Context, source []byte) (*Definition, error) {
	cm, err := e.compileScript(source)
	if err != nil {
		return nil, err
	}
	return e.define(ctx, cm.(*compiled).source)
}

func (e *Engine) define(ctx context.Context, source string) (*Definition, error) {
	w, err := e.pool.get(ctx)
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(proto.Activation{Kind: proto.KindDefine, Source: source, Seed: make([]byte, 32), Now: time.Now().UnixNano(), Limits: e.lim})
	if err := w.send(proto.FrameActivate, raw); err != nil {
		e.pool.put(w, false)
		return nil, fmt.Errorf("jsprogram: starting a definition: %w", err)
	}
	backstop := time.NewTimer(e.lim.JSTime + e.grace)
	defer backstop.Stop()
	lane := time.NewTimer(e.longAfter) // as in instance.run
	defer lane.Stop()
	refuse := func(perr *WorkflowProgramError) (*Definition, error) {
		return nil, &host.PluginError{Reason: "bad_program", Detail: "the script cannot be loaded: " + perr.Message + " [" + perr.Code + "]"}
	}
	for {
		select {
		case f, ok := <-w.frames:
			if !ok {
				e.pool.put(w, false)
				return refuse(w.death(e.lim))
			}
			switch f.typ {
			case proto.FrameWrite:
				continue // console output while the script loads goes nowhere
			case proto.FrameDone:
				var d proto.Done
				if err := json.Unmarshal(f.body, &d); err != nil || (d.Status == "defined") != (d.Definition != nil) {
					e.pool.put(w, false)
					return refuse(&WorkflowProgramError{Code: CodeWorkerCrashed, Message: "the worker's answer is not a definition"})
				}
				if d.Status == "defined" {
					e.pool.put(w, true)
					return (*Definition)(d.Definition), nil
				}
				e.pool.put(w, d.Status == "failed" && d.Error != nil && d.Error.Code != CodeWorkerCrashed)
				if d.Error == nil {
					d.Error = &WorkflowProgramError{Code: CodeWorkerCrashed, Message: "the worker failed without saying why"}
				}
				return refuse(d.Error)
			}
			e.pool.put(w, false)
			return refuse(&WorkflowProgramError{Code: CodeWorkerCrashed, Message: fmt.Sprintf("the worker sent frame %q while the script loaded", f.typ)})
		case <-lane.C:
			if !e.pool.promote(w) {
				lane.Reset(laneRetry)
			}
		case <-backstop.C:
			e.pool.put(w, false)
			return refuse(&WorkflowProgramError{Code: CodeJSTime, Message: fmt.Sprintf("the script's top level ran JavaScript for more than %s (stopped inside a built-in)", e.lim.JSTime)})
		case <-ctx.Done():
			e.pool.put(w, false)
			return nil, ctx.Err()
		}
	}
}

// Definition is what a tool script defines with defineWorkflowTool: its
// Description, InputSchema, Entry (execute, task or serve) and Steps (its
// "use step" functions, in source order), as a worker reads them.
type Definition proto.Definition

// Manifest is the manifest of the tool a script defines, under name.
func (d *Definition) Manifest(name string) host.Manifest {
	return host.Manifest{
		Name:        name,
		Description: d.Description,
		Entry:       d.Entry,
		InputSchema: d.InputSchema,
		Engine:      EngineName,
	}
}

// matches refuses a manifest that describes another tool than the script
// defines: the host would check inputs against one schema while the script
// expects another.
func (d *Definition) matches(m host.Manifest) error {
	bad := func(what string, got, want any) error {
		return &host.PluginError{Reason: "manifest_mismatch", Detail: fmt.Sprintf("the manifest's %s is %v, but the script defines %v", what, got, want)}
	}
	if m.Entry != d.Entry {
		return bad("entry", m.Entry, d.Entry)
	}
	if m.Description != d.Description {
		return bad("description", fmt.Sprintf("%q", proto.Clip(m.Description, 200)), fmt.Sprintf("%q", proto.Clip(d.Description, 200)))
	}
	var a, b any
	if json.Unmarshal(m.InputSchema, &a) != nil || json.Unmarshal(d.InputSchema, &b) != nil || !reflect.DeepEqual(a, b) {
		return bad("inputSchema", proto.Clip(string(m.InputSchema), 200), proto.Clip(string(d.InputSchema), 200))
	}
	return nil
}

// RegisterTool registers the tool a script defines as the next version of
// the plugin name, on a host that has an Engine under EngineName
// (host.Options.Engines).
func RegisterTool(ctx context.Context, h *host.Host, name string, source []byte) (host.Plugin, error) {
	he, err := h.EngineFor(ctx, EngineName)
	if errors.Is(err, host.ErrClosed) {
		return host.Plugin{}, err
	}
	if err != nil {
		return host.Plugin{}, fmt.Errorf("%w: this host has no JavaScript engine: %v", host.ErrBadManifest, err)
	}
	e, ok := he.(*Engine)
	if !ok {
		return host.Plugin{}, fmt.Errorf("%w: this host's %s engine is not a jsprogram engine", host.ErrBadManifest, EngineName)
	}
	def, err := e.DefineTool(ctx, source)
	if err != nil {
		return host.Plugin{}, err
	}
	return h.AddPlugin(ctx, source, def.Manifest(name))
}

// IsScript reports whether a module is a script rather than WebAssembly or
// a workflow tool's configuration.
//
// Deprecated: use plugins.IsScript.
func IsScript(module []byte) bool { return plugins.IsScript(module) }

// Register registers an upload as plugins.Classify decided it: a script
// that defines its own tool through RegisterTool, anything else with its
// manifest through h.AddPlugin. The surfaces that take uploads (the CLI,
// the HTTP API, the console) call Classify and then this, so none of them
// has a rule of its own.
func Register(ctx context.Context, h *host.Host, d plugins.Decision) (host.Plugin, error) {
	if d.Kind == plugins.KindScript {
		return RegisterTool(ctx, h, d.Name, d.Module)
	}
	return h.AddPlugin(ctx, d.Module, d.Manifest)
}
