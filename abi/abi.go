// Package abi is the contract between the sandflow host and a guest tool
// compiled to WebAssembly: the import module and its functions, the exports a
// guest must provide, op kinds, status codes, error types and the ABI
// version. The protocol itself is specified in README.md beside this file so
// that a guest can be written in any language from that document alone; the
// constants here are spelled like the wire names they stand for.
//
// The module (this package and abi/jsonwire) imports nothing but the
// standard library and compiles under GOOS=wasip1, so both the host and the
// Go guest SDK share one definition, and a tool that requires the SDK gets
// nothing of the host with it.
package abi

// Version is the ABI version this package describes. A guest reports the
// version it was built against from its VersionExport; the host refuses a
// module whose version it does not implement.
const Version = 1

// ImportModule is the name of the host module a guest imports its functions
// from. Only this module and a restricted set of WASI preview1 functions may
// be imported.
const ImportModule = "sandflow"

// Host functions in ImportModule.
const (
	// FuncOp performs one op:
	//	op(kind, name_ptr, name_len, payload_ptr, payload_len, resp_ptr, resp_cap i32) -> i32
	// It returns the length of the response body. When that length is at
	// most resp_cap, the body was written at resp_ptr; otherwise the host holds
	// it until the next op and the guest fetches it with FuncRead.
	FuncOp = "op"
	// FuncRead copies the held response body of the last op into guest memory:
	//	read(ptr, len i32) -> i32
	// It returns the number of bytes copied, or -1 when no body is held.
	FuncRead = "read"
)

// Exports a guest module provides.
const (
	// VersionExport returns the ABI version the guest was built for: () -> i32.
	VersionExport = "sandflow_abi_version"
	// RunExport starts or continues the workflow body: () -> i32. It returns
	// RunDone after the guest issued OpComplete, or RunSuspended after an
	// OpAwait answered StatusSuspend.
	RunExport = "sandflow_run"
	// StepExport runs one step attempt in a step instance: () -> i32. The
	// guest reads the attempt with OpStepInput and reports it with
	// OpStepComplete, then returns RunDone.
	StepExport = "sandflow_step"
	// InitializeExport is the WASI reactor initialiser, () -> (); the host
	// calls it once after instantiation when the module exports it.
	InitializeExport = "_initialize"
	// CommandExport is a WASI command's entry point. A guest must be a
	// reactor: a module exporting it is refused.
	CommandExport = "_start"
	// PrepareExport is optional: () -> (). The host calls it once, right
	// after InitializeExport and under the same limits, before the instance
	// runs anything or its state is taken as the plugin's base image. It
	// is for setup that cannot happen during initialisation: a Go guest's
	// init runs with the runtime's init-time thread lock held, and a
	// coroutine made there could only be switched to under that lock.
	PrepareExport = "sandflow_prepare"
	// DescribeExport is optional: () -> i32 (the result is not read). The host calls it
	// once at upload, on an initialised instance, and the guest issues one
	// OpDescribe in it saying which tool it is. A module that describes
	// itself as another tool than its manifest names is refused
	// (plugin_manifest_mismatch).
	DescribeExport = "sandflow_describe"
	// MemoryExport is the linear memory the host reads and writes.
	MemoryExport = "memory"
)

// Description is OpDescribe's payload: what the module says it is. Every
// member is optional; the host checks those given against the manifest.
type Description struct {
	// Name is the tool's name, as the manifest's "name" must be.
	Name string `json:"name,omitempty"`
}

// Results of RunExport and StepExport.
const (
	RunDone      int32 = 0
	RunSuspended int32 = 1
)

// WASIModule is the WASI preview1 import module. The host provides every
// function of it, but with no preopened directories, no sockets, no
// environment and no arguments; clocks, randomness and sleep are supplied by
// the host so that they are the same on replay.
const WASIModule = "wasi_snapshot_preview1"

// BodyHeaderSize is the size of the fixed header at the start of every op
// response body: a little-endian u32 Status followed by a u32 future id.
const BodyHeaderSize = 8

// MaxFuturesPerAwait bounds the number of future ids in one OpAwait request.
const MaxFuturesPerAwait = 4096
