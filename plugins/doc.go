// Package plugins says what a plugin is and how it is admitted, before any
// engine or store is involved: the Manifest and its checks, the checks of
// a WebAssembly module's imports and exports against the ABI, what a
// script is, and Classify, the one rule by which every surface (the CLI,
// the HTTP API, the console) decides what an upload is.
//
// An upload is one of:
//
//   - a WebAssembly module (bytes that start with \0asm) with a manifest;
//   - a JavaScript tool script without a manifest: its
//     defineWorkflowTool({...}) call is its manifest, read by running it,
//     so registering it is the goja engine's job (jsprogram.RegisterTool);
//   - a module that is not WebAssembly (a script, or a workflow tool's
//     configuration) with a manifest naming the engine that runs it.
//
// What admission checks here is pure: functions of the bytes and the
// host's limits, safe for concurrent use and cheap enough to run before
// anything is compiled. Compiling a module, probing an instance for its
// ABI version, and storing versions are the host's (host.AddPlugin), which
// calls into this package first; the host re-exports its types and errors
// under their old names (host.Manifest is Manifest, host.PluginError is
// PluginError), so errors.Is and errors.As match either spelling.
//
// Errors are typed: *PluginError (ErrBadPlugin) for a module the host
// refuses, with a stable Reason; ErrBadManifest for a manifest that does
// not hold; *UploadError for an upload that lacks what its kind needs.
//
// See RATIONALE.md, "Why is admission its own package?".
package plugins
