package plugins

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
)

// wasmMagic starts every WebAssembly module.
var wasmMagic = []byte("\x00asm")

// IsWasm reports whether a module is WebAssembly by its header. The rest
// is CheckModule's to check.
func IsWasm(module []byte) bool { return bytes.HasPrefix(module, wasmMagic) }

// WorkflowToolConfig is the module of a workflow tool: not a program but
// JSON that says which program kind the goja engine runs, with what
// budget, such as {"sandflow": "workflow-tool", "maxSubagents": 8}.
type WorkflowToolConfig struct {
	Sandflow     string `json:"sandflow"`
	MaxSubagents *int   `json:"maxSubagents,omitempty"`
}

// ParseWorkflowToolConfig reads a module as a workflow tool's
// configuration: JSON that decodes into WorkflowToolConfig with a
// "sandflow" member that is not empty. ok is false for anything else,
// which the goja engine runs as a script. Whether Sandflow names a
// program kind the engine knows is the engine's to check.
func ParseWorkflowToolConfig(module []byte) (c WorkflowToolConfig, ok bool) {
	if json.Unmarshal(module, &c) != nil || c.Sandflow == "" {
		return WorkflowToolConfig{}, false
	}
	return c, true
}

// IsScript reports whether a module is a JavaScript tool script rather
// than WebAssembly (it starts with \0asm) or a workflow tool's
// configuration. Any other bytes are a script; whether they parse and
// define a tool is found by running them.
func IsScript(module []byte) bool {
	if IsWasm(module) {
		return false
	}
	_, isConfig := ParseWorkflowToolConfig(module)
	return !isConfig
}

// isScriptFile reports whether a path names a JavaScript file.
func isScriptFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".js", ".mjs":
		return true
	}
	return false
}

// Upload is a plugin upload as a surface received it.
type Upload struct {
	// Module is the uploaded bytes: a WebAssembly module, a JavaScript
	// tool script, or a workflow tool's configuration.
	Module []byte
	// Manifest, when not nil, reads the manifest that came with the
	// module; nil means none came. Classify calls it at most once, and
	// only when the upload needs a manifest, so a surface may read a file
	// or a form part lazily and its errors come in the order they always
	// have.
	Manifest func() ([]byte, error)
	// Name names the tool of a script that came without a manifest.
	Name string
	// Path is the name of the file the module was read from, for a
	// surface that takes files by name (the CLI). Its extension then says
	// what the bytes are: a .js or .mjs file is a script (and takes no
	// manifest, and is named after the file unless Name is set), and a
	// file that is neither WebAssembly nor a script file is refused unless
	// it holds a workflow tool's configuration. Empty for uploads whose
	// names say nothing (forms): the bytes alone decide.
	Path string
}

// Kind is what an upload is.
type Kind int

const (
	// KindWasm is a WebAssembly module with its manifest.
	KindWasm Kind = iota + 1
	// KindScript is a JavaScript tool script without a manifest: its
	// defineWorkflowTool call defines the tool, found by running it.
	KindScript
	// KindProgram is a module that is not WebAssembly, with a manifest:
	// a script, or a workflow tool's configuration, run by the engine the
	// manifest names.
	KindProgram
)

func (k Kind) String() string {
	switch k {
	case KindWasm:
		return "wasm"
	case KindScript:
		return "script"
	case KindProgram:
		return "program"
	}
	return "unknown"
}

// Decision is what Classify made of an upload.
type Decision struct {
	Kind   Kind
	Module []byte
	// Name is the tool's name for KindScript.
	Name string
	// Manifest is the parsed and checked manifest for KindWasm and
	// KindProgram.
	Manifest Manifest
}

// Classify decides what an upload is, and takes from it what registering
// it needs. Every surface that takes uploads calls it, so one rule holds
// for all:
//
//   - Bytes that start with \0asm are WebAssembly; they need a manifest.
//   - Without a manifest, a script (IsScript) defines its own tool and
//     needs a name; anything else is refused for lacking a manifest.
//   - With a manifest, any module is registered under it; its engine
//     decides whether it runs.
//   - When the upload names a file (Upload.Path), the file's extension
//     speaks first; see Upload.Path.
//
// Errors: an *UploadError for what the upload lacks, the error of
// Upload.Manifest, or ErrBadManifest from ParseManifest. The module
// itself is not checked here: the host does that as it adds the plugin.
func Classify(u Upload) (Decision, error) {
	wasm := IsWasm(u.Module)
	if u.Path != "" {
		script := !wasm && isScriptFile(u.Path)
		if !wasm && !script && IsScript(u.Module) {
			return Decision{}, &UploadError{Problem: ProblemNotPluginFile, Path: u.Path}
		}
		if script {
			if u.Manifest != nil {
				return Decision{}, &UploadError{Problem: ProblemManifestForScript, Path: u.Path}
			}
			name := u.Name
			if name == "" {
				name = strings.TrimSuffix(filepath.Base(u.Path), filepath.Ext(u.Path))
			}
			return Decision{Kind: KindScript, Module: u.Module, Name: name}, nil
		}
		if u.Manifest == nil {
			return Decision{}, &UploadError{Problem: ProblemNoManifest, Path: u.Path}
		}
		if u.Name != "" {
			return Decision{}, &UploadError{Problem: ProblemNameForModule, Path: u.Path}
		}
	} else if u.Manifest == nil {
		if !IsScript(u.Module) {
			return Decision{}, &UploadError{Problem: ProblemNoManifest}
		}
		if u.Name == "" {
			return Decision{}, &UploadError{Problem: ProblemNoName}
		}
		return Decision{Kind: KindScript, Module: u.Module, Name: u.Name}, nil
	}
	raw, err := u.Manifest()
	if err != nil {
		return Decision{}, err
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return Decision{}, err
	}
	k := KindProgram
	if wasm {
		k = KindWasm
	}
	return Decision{Kind: k, Module: u.Module, Manifest: m}, nil
}
