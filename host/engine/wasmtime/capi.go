//go:build cgo

package wasmtime

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// From wasmtime.h and wasm.h (wasmtime v39), in the library wasmtime-go
// links. Declared here so that this package needs no include path into the
// module cache; only opaque pointers and the few layouts noted are used.
typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_error wasmtime_error_t;
typedef struct wasmtime_linker wasmtime_linker_t;
typedef struct wasmtime_caller wasmtime_caller_t;
typedef struct wasm_trap_t wasm_trap_t;
typedef struct wasm_functype_t wasm_functype_t;
typedef struct wasm_valtype_t wasm_valtype_t;
typedef struct wasm_valtype_vec_t {
	size_t size;
	wasm_valtype_t **data;
} wasm_valtype_vec_t;
typedef uint8_t wasmtime_update_deadline_kind_t;

// wasmtime_extern_t is a uint8_t kind and then a union aligned to 8 whose
// biggest member is 24 bytes (32 bytes in all); a memory is kind 3 and its
// wasmtime_memory_t is at offset 8. This is room enough for it.
typedef struct sf_extern {
	uint8_t kind;
	uint64_t of[5];
} sf_extern_t;
#define SF_EXTERN_MEMORY 3

extern wasmtime_context_t *wasmtime_store_context(wasmtime_store_t *store);
extern void wasmtime_store_epoch_deadline_callback(wasmtime_store_t *store,
	wasmtime_error_t *(*func)(wasmtime_context_t *context, void *data, uint64_t *epoch_deadline_delta,
		wasmtime_update_deadline_kind_t *update_kind),
	void *data, void (*finalizer)(void *));
extern wasmtime_error_t *wasmtime_error_new(const char *message);
extern void wasmtime_error_delete(wasmtime_error_t *error);
extern wasm_valtype_t *wasm_valtype_new(uint8_t kind);
extern void wasm_valtype_vec_new(wasm_valtype_vec_t *out, size_t size, wasm_valtype_t *const data[]);
extern wasm_functype_t *wasm_functype_new(wasm_valtype_vec_t *params, wasm_valtype_vec_t *results);
extern void wasm_functype_delete(wasm_functype_t *type);
extern wasmtime_error_t *wasmtime_linker_define_func_unchecked(wasmtime_linker_t *linker,
	const char *module, size_t module_len, const char *name, size_t name_len, const wasm_functype_t *ty,
	wasm_trap_t *(*cb)(void *env, wasmtime_caller_t *caller, void *args_and_results, size_t n),
	void *data, void (*finalizer)(void *));
extern wasmtime_context_t *wasmtime_caller_context(wasmtime_caller_t *caller);
extern bool wasmtime_caller_export_get(wasmtime_caller_t *caller, const char *name, size_t name_len, sf_extern_t *item);
extern void wasmtime_extern_delete(sf_extern_t *item);
extern uint8_t *wasmtime_memory_data(const wasmtime_context_t *store, const void *memory);
extern size_t wasmtime_memory_data_size(const wasmtime_context_t *store, const void *memory);
extern wasm_trap_t *wasmtime_trap_new(const char *msg, size_t msg_len);

// Exported by export.go.
extern int sandflowWasmtimeEpoch(uintptr_t handle);
extern int sandflowWasmtimeHostCall(uintptr_t fn, uintptr_t ctx, uint8_t *mem, size_t mem_len, void *args, size_t n);

static wasmtime_error_t *sandflow_epoch(wasmtime_context_t *context, void *data, uint64_t *delta,
	wasmtime_update_deadline_kind_t *kind) {
	if (sandflowWasmtimeEpoch((uintptr_t)data)) {
		return wasmtime_error_new("sandflow: guest stopped by the host");
	}
	*delta = 1;
	*kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
	return NULL;
}

// sandflow_watch_epochs installs sandflow_epoch as the store's epoch
// deadline callback. It first checks that store really is a
// wasmtime_store_t, by asking for its context and comparing it with the one
// wasmtime-go gave; it returns 0 if not.
static int sandflow_watch_epochs(void *store, void *context, uintptr_t handle) {
	if ((void *)wasmtime_store_context((wasmtime_store_t *)store) != context) {
		return 0;
	}
	wasmtime_store_epoch_deadline_callback((wasmtime_store_t *)store, sandflow_epoch, (void *)handle, NULL);
	return 1;
}

// sandflow_host_call is every host function the guest imports: it finds
// the caller's memory and hands everything to Go in one call, so a host
// call costs one crossing from C to Go and none back.
static wasm_trap_t *sandflow_host_call(void *env, wasmtime_caller_t *caller, void *args, size_t n) {
	wasmtime_context_t *context = wasmtime_caller_context(caller);
	uint8_t *mem = NULL;
	size_t len = 0;
	sf_extern_t item;
	if (wasmtime_caller_export_get(caller, "memory", 6, &item)) {
		if (item.kind == SF_EXTERN_MEMORY) {
			mem = wasmtime_memory_data(context, &item.of);
			len = wasmtime_memory_data_size(context, &item.of);
		}
		wasmtime_extern_delete(&item);
	}
	if (sandflowWasmtimeHostCall((uintptr_t)env, (uintptr_t)context, mem, len, args, n)) {
		static const char msg[] = "sandflow: guest stopped by the host";
		return wasmtime_trap_new(msg, sizeof msg - 1);
	}
	return NULL;
}

// sandflow_define defines module.name in the linker as host function fn.
// Value kinds are wasm.h's: 0 for i32, 1 for i64.
static int sandflow_define(void *linker, const char *module, const char *name,
	const uint8_t *params, size_t np, const uint8_t *results, size_t nr, uintptr_t fn) {
	wasm_valtype_t *ps[16], *rs[1];
	if (np > 16 || nr > 1) {
		return 0;
	}
	for (size_t i = 0; i < np; i++) {
		ps[i] = wasm_valtype_new(params[i]);
	}
	for (size_t i = 0; i < nr; i++) {
		rs[i] = wasm_valtype_new(results[i]);
	}
	wasm_valtype_vec_t pv, rv;
	wasm_valtype_vec_new(&pv, np, ps);
	wasm_valtype_vec_new(&rv, nr, rs);
	wasm_functype_t *ty = wasm_functype_new(&pv, &rv);
	wasmtime_error_t *err = wasmtime_linker_define_func_unchecked((wasmtime_linker_t *)linker,
		module, strlen(module), name, strlen(name), ty, sandflow_host_call, (void *)fn, NULL);
	wasm_functype_delete(ty);
	if (err != NULL) {
		wasmtime_error_delete(err);
		return 0;
	}
	return 1;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandflow/sandflow/internal/wasip1"
)

// wasmtime-go wraps neither the epoch deadline callback nor host functions
// that take raw values, so this file calls wasmtime's C API for them. It
// needs the C pointers of a wasmtime.Store and a wasmtime.Linker, which are
// their first field (wasmtime-go v39); both uses check them.

// cPtr reads the C pointer that is the first field of a wasmtime-go object.
func cPtr[T any](v *T) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(v)) }

// watchEpochs makes wasmtime call back into the host, with h, whenever the
// store passes its epoch deadline, instead of trapping: the host then
// decides whether the guest goes on (another tick) or stops (its CPU budget
// is spent, or its context is done).
func watchEpochs(s *wasmtime.Store, h cgo.Handle) error {
	ok := C.sandflow_watch_epochs(cPtr(s), unsafe.Pointer(s.Context()), C.uintptr_t(h))
	runtime.KeepAlive(s)
	if ok == 0 {
		return errors.New("wasmtime: cannot install the epoch callback: wasmtime.Store is not laid out as this version expects")
	}
	return nil
}

// Host function numbers, the env of each definition.
const (
	wtFnOp   = 0
	wtFnRead = 1
	wtFnWASI = 2 // + index in wasip1.Funcs
)

func wasmKinds(ts []wasip1.ValType) []byte {
	out := make([]byte, len(ts)+1) // never empty, for the C pointer
	for i, t := range ts {
		if t == wasip1.I64 {
			out[i] = 1
		}
	}
	return out[:len(ts)]
}

// defineHostFunc defines module.name in the linker as host function fn.
func defineHostFunc(l *wasmtime.Linker, module, name string, params, results []wasip1.ValType, fn int) error {
	cm, cn := C.CString(module), C.CString(name)
	defer C.free(unsafe.Pointer(cm))
	defer C.free(unsafe.Pointer(cn))
	p, r := wasmKinds(params), wasmKinds(results)
	ok := C.sandflow_define(cPtr(l), cm, cn, (*C.uint8_t)(unsafe.SliceData(p[:cap(p)])), C.size_t(len(p)),
		(*C.uint8_t)(unsafe.SliceData(r[:cap(r)])), C.size_t(len(r)), C.uintptr_t(fn))
	runtime.KeepAlive(l)
	if ok == 0 {
		return fmt.Errorf("wasmtime: cannot define %s.%s", module, name)
	}
	return nil
}

// checkLinker checks that the host functions are in the linker, as
// wasmtime-go sees it: that cPtr found the linker.
func checkLinker(e *wasmtime.Engine, l *wasmtime.Linker, module, name string) error {
	s := wasmtime.NewStore(e)
	defer s.Close()
	if ex := l.Get(s, module, name); ex == nil || ex.Func() == nil {
		return errors.New("wasmtime: host functions are not in the linker: wasmtime.Linker is not laid out as this version expects")
	}
	return nil
}

// wtRaw is a wasmtime_val_raw_t: an i32 or i64 in its first bytes,
// little-endian.
type wtRaw [16]byte

// wtStores finds an instance from its store's context pointer, which is
// what a host call knows.
var wtStores sync.Map // uintptr -> *wtInstance

func wtInstanceOf(ctx uintptr) *wtInstance {
	v, _ := wtStores.Load(ctx)
	i, _ := v.(*wtInstance)
	return i
}

func storeContext(s *wasmtime.Store) uintptr {
	p := uintptr(unsafe.Pointer(s.Context()))
	runtime.KeepAlive(s)
	return p
}
