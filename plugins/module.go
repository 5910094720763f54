package plugins

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/wasmparse"
)

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

// CheckModule checks a WebAssembly module's structure, imports and exports
// against the ABI without compiling it: the header and sections parse
// within wasmparse's limits; every import is a function of the sandflow
// ABI or an allowed WASI preview1 function, with its type; the ABI version
// export and the run and step exports are there, () -> (i32); the module
// is a reactor, not a WASI command; it exports its memory. Whether the
// module was built for this ABI version is asked of an instance, at upload
// (the host's probe). Errors are *PluginError.
func CheckModule(wasm []byte) error {
	_, err := checkModule(wasm)
	return err
}

// CheckModuleLimits is CheckModule, and checks that the module's initial
// memory fits l.
func CheckModuleLimits(wasm []byte, l Limits) error {
	mod, err := checkModule(wasm)
	if err != nil {
		return err
	}
	if need := uint64(mod.MemoryMinPages) << 16; need > l.MemoryBytes {
		return &PluginError{Reason: "memory", Detail: fmt.Sprintf("the module starts with %d bytes of memory, over the limit of %d", need, l.MemoryBytes)}
	}
	return nil
}

// Describes reports whether a module exports DescribeExport, so that the
// host's upload probe asks it what tool it is. The module is checked
// (CheckModule) first; a module that does not parse describes nothing.
func Describes(wasm []byte) bool {
	mod, err := wasmparse.Parse(wasm)
	if err != nil {
		return false
	}
	_, ok := mod.Export(abi.DescribeExport)
	return ok
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
	if err := checkImports(mod); err != nil {
		return nil, err
	}
	if err := checkExports(mod); err != nil {
		return nil, err
	}
	return mod, nil
}

// checkImports refuses an import that is not a function of the sandflow
// ABI, with its type, or a WASI preview1 function the host provides.
func checkImports(mod *wasmparse.Module) error {
	for _, imp := range mod.Imports {
		what := fmt.Sprintf("%s.%s", imp.Module, imp.Name)
		if imp.Kind != wasmparse.KindFunc {
			return &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a function; a guest may import only functions of %s and %s", what, abi.ImportModule, abi.WASIModule)}
		}
		switch imp.Module {
		case abi.ImportModule:
			want := map[string]wasmparse.FuncType{abi.FuncOp: sigOp, abi.FuncRead: sigRead}
			sig, ok := want[imp.Name]
			if !ok {
				return &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a function of the sandflow ABI version %d", what, abi.Version)}
			}
			if !sameSig(imp.Type, sig) {
				return &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s has type %s, the ABI says %s", what, sigString(imp.Type), sigString(&sig))}
			}
		case abi.WASIModule:
			if !allowedWASI[imp.Name] {
				return &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not a WASI preview1 function this host provides", what)}
			}
		default:
			return &PluginError{Reason: "import", Detail: fmt.Sprintf("import %s is not allowed: a guest may import only from %s and %s", what, abi.ImportModule, abi.WASIModule)}
		}
	}
	return nil
}

// checkExports requires the exports the ABI names, with their types.
func checkExports(mod *wasmparse.Module) error {
	if e, ok := mod.Export(abi.VersionExport); !ok {
		return &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("module does not export %s, so it was not built for the sandflow ABI", abi.VersionExport)}
	} else if !sameSig(e.Type, sigI32) {
		return &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("export %s has type %s, want () -> (i32)", abi.VersionExport, sigString(e.Type))}
	}
	for _, name := range []string{abi.RunExport, abi.StepExport} {
		e, ok := mod.Export(name)
		if !ok {
			return &PluginError{Reason: "missing_export", Detail: "module does not export " + name}
		}
		if !sameSig(e.Type, sigI32) {
			return &PluginError{Reason: "missing_export", Detail: fmt.Sprintf("export %s has type %s, want () -> (i32)", name, sigString(e.Type))}
		}
	}
	if _, ok := mod.Export(abi.CommandExport); ok {
		// A command's toolchain runs its constructors in _start, which the
		// host never calls, or around every export call (wasm-ld wraps a
		// command's exports so), which would reset the workflow's state at
		// each sandflow_run.
		return &PluginError{Reason: "not_reactor", Detail: fmt.Sprintf("module exports %s, so it is a WASI command; a guest must be a reactor (clang -mexec-model=reactor, Go -buildmode=c-shared, a Rust cdylib)", abi.CommandExport)}
	}
	if e, ok := mod.Export(abi.InitializeExport); ok && !sameSig(e.Type, sigVoid) {
		return &PluginError{Reason: "not_reactor", Detail: fmt.Sprintf("export %s has type %s, want () -> ()", abi.InitializeExport, sigString(e.Type))}
	}
	if e, ok := mod.Export(abi.PrepareExport); ok && !sameSig(e.Type, sigVoid) {
		return &PluginError{Reason: "missing_export", Detail: fmt.Sprintf("export %s has type %s, want () -> ()", abi.PrepareExport, sigString(e.Type))}
	}
	if e, ok := mod.Export(abi.DescribeExport); ok && !sameSig(e.Type, sigI32) {
		return &PluginError{Reason: "missing_export", Detail: fmt.Sprintf("export %s has type %s, want () -> (i32)", abi.DescribeExport, sigString(e.Type))}
	}
	if e, ok := mod.Export(abi.MemoryExport); !ok || e.Kind != wasmparse.KindMemory {
		return &PluginError{Reason: "missing_export", Detail: "module does not export its memory as \"memory\""}
	}
	return nil
}
