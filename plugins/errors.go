package plugins

import (
	"errors"
	"fmt"
)

// Sentinel errors of admission. Compare with errors.Is; the typed errors
// below match the sentinel of their class through Is. The host re-exports
// each under the same name (host.ErrBadPlugin is ErrBadPlugin).
var (
	// ErrBadPlugin is returned when a plugin upload is refused; the
	// *PluginError says why.
	ErrBadPlugin = errors.New("plugin refused")
	// ErrBadManifest is returned when a plugin manifest is invalid, or an
	// upload lacks the manifest or name its kind needs.
	ErrBadManifest = errors.New("invalid plugin manifest")
	// ErrCompileTimeout is matched by the *PluginError returned when a
	// module did not compile within the host's compile timeout.
	ErrCompileTimeout = errors.New("module compilation timed out")
)

// PluginError is returned when a plugin upload is refused.
type PluginError struct {
	// Reason is a stable code: "not_wasm", "malformed", "import",
	// "abi_version", "missing_export", "not_reactor" (a WASI command, or an
	// _initialize that is not () -> ()), "too_large", "memory" (the
	// module's initial memory is over the limit), "module_limit" (a
	// structural limit: Err says which), "compile", "compile_timeout",
	// "instantiate" (the probe instance could not be made), and for
	// JavaScript tools "bad_program" and "manifest_mismatch".
	Reason string
	Detail string
	// Err is the cause, when there is one to match with errors.As.
	Err error
}

func (e *PluginError) Error() string { return "plugin refused (" + e.Reason + "): " + e.Detail }

// Is makes errors.Is(err, ErrBadPlugin) true, and ErrCompileTimeout for a
// compilation that timed out.
func (e *PluginError) Is(target error) bool {
	return target == ErrBadPlugin || (target == ErrCompileTimeout && e.Reason == "compile_timeout")
}

// Unwrap returns the cause.
func (e *PluginError) Unwrap() error { return e.Err }

// Problem says what an upload lacks or has too much of for its kind.
type Problem string

// The problems Classify reports in an *UploadError.
const (
	// ProblemNoName: a JavaScript tool script came without a manifest,
	// so nothing names its tool, and without a name.
	ProblemNoName Problem = "no_name"
	// ProblemNoManifest: a module that is not a script (a WebAssembly
	// module, a workflow tool's configuration) came without a manifest.
	ProblemNoManifest Problem = "no_manifest"
	// ProblemManifestForScript: a script file (Upload.Path ends in .js or
	// .mjs) came with a manifest; its defineWorkflowTool call is its
	// manifest.
	ProblemManifestForScript Problem = "manifest_for_script"
	// ProblemNameForModule: a module with a manifest came with a name;
	// the manifest names the tool.
	ProblemNameForModule Problem = "name_for_module"
	// ProblemNotPluginFile: a file (Upload.Path) is neither a WebAssembly
	// module nor a script file, yet its bytes are not a workflow tool's
	// configuration either.
	ProblemNotPluginFile Problem = "not_plugin_file"
)

// UploadError is returned by Classify when an upload does not hold what
// its kind needs. Each surface words the problem in its own terms (a form
// field, a flag); Error gives a plain default. It matches ErrBadPlugin for
// ProblemNotPluginFile and ErrBadManifest for the others.
type UploadError struct {
	Problem Problem
	// Path is Upload.Path, for the messages that name the file.
	Path string
}

func (e *UploadError) Error() string {
	switch e.Problem {
	case ProblemNoName:
		return ErrBadManifest.Error() + ": a JavaScript tool script without a manifest needs a name for its tool"
	case ProblemNoManifest:
		return ErrBadManifest.Error() + ": a WebAssembly module needs a manifest"
	case ProblemManifestForScript:
		return ErrBadManifest.Error() + ": a JavaScript tool script needs no manifest: its defineWorkflowTool call is its manifest"
	case ProblemNameForModule:
		return ErrBadManifest.Error() + ": a name is for JavaScript tool scripts; a module's manifest names its tool"
	case ProblemNotPluginFile:
		return fmt.Sprintf("%s: %s is neither a WebAssembly module (it does not start with \\0asm) nor a JavaScript tool script (a .js or .mjs file)", ErrBadPlugin, e.Path)
	}
	return ErrBadManifest.Error() + ": " + string(e.Problem)
}

// Is makes errors.Is(err, ErrBadPlugin) true for a file that is no
// plugin, and errors.Is(err, ErrBadManifest) for the other problems.
func (e *UploadError) Is(target error) bool {
	if e.Problem == ProblemNotPluginFile {
		return target == ErrBadPlugin
	}
	return target == ErrBadManifest
}
