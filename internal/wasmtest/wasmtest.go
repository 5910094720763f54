// Package wasmtest assembles small WebAssembly modules in tests: hostile
// and malformed guests that no toolchain would emit, written out byte by
// byte so no binary needs committing.
package wasmtest

import "github.com/sandflow/sandflow/internal/wasmbin"

// Func is a function to define: its type and its body (without the locals
// vector or the final end, which Module adds).
type Func struct {
	Params, Results []byte
	Body            []byte
}

// Import is a function import.
type Import struct {
	Module, Name    string
	Params, Results []byte
}

// Module describes a module to assemble.
type Module struct {
	Imports []Import
	Funcs   []Func
	// Exports maps export names to function indices (imports count first).
	Exports map[string]uint32
	// Memory, when positive, defines a memory of that many pages exported
	// as "memory"; MaxPages bounds it when positive.
	Memory, MaxPages uint32
}

// Value types.
const (
	I32 byte = 0x7f
	I64 byte = 0x7e
)

func uleb(b []byte, v uint32) []byte { return wasmbin.AppendULEB(b, uint64(v)) }

func name(b []byte, s string) []byte { return append(uleb(b, uint32(len(s))), s...) }

func section(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = uleb(out, uint32(len(body)))
	return append(out, body...)
}

// Bytes assembles the module.
func (m Module) Bytes() []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	type sig struct{ p, r string }
	var sigs []sig
	index := map[sig]uint32{}
	typeOf := func(p, r []byte) uint32 {
		s := sig{string(p), string(r)}
		if i, ok := index[s]; ok {
			return i
		}
		index[s] = uint32(len(sigs))
		sigs = append(sigs, s)
		return index[s]
	}
	for _, im := range m.Imports {
		typeOf(im.Params, im.Results)
	}
	for _, f := range m.Funcs {
		typeOf(f.Params, f.Results)
	}
	var b []byte
	b = uleb(b, uint32(len(sigs)))
	for _, s := range sigs {
		b = append(b, 0x60)
		b = uleb(b, uint32(len(s.p)))
		b = append(b, s.p...)
		b = uleb(b, uint32(len(s.r)))
		b = append(b, s.r...)
	}
	out = section(out, 1, b)
	if len(m.Imports) > 0 {
		b = uleb(nil, uint32(len(m.Imports)))
		for _, im := range m.Imports {
			b = name(b, im.Module)
			b = name(b, im.Name)
			b = append(b, 0)
			b = uleb(b, typeOf(im.Params, im.Results))
		}
		out = section(out, 2, b)
	}
	b = uleb(nil, uint32(len(m.Funcs)))
	for _, f := range m.Funcs {
		b = uleb(b, typeOf(f.Params, f.Results))
	}
	out = section(out, 3, b)
	if m.Memory > 0 {
		b = uleb(nil, 1)
		if m.MaxPages > 0 {
			b = append(b, 1)
			b = uleb(b, m.Memory)
			b = uleb(b, m.MaxPages)
		} else {
			b = append(b, 0)
			b = uleb(b, m.Memory)
		}
		out = section(out, 5, b)
	}
	n := len(m.Exports)
	if m.Memory > 0 {
		n++
	}
	b = uleb(nil, uint32(n))
	if m.Memory > 0 {
		b = name(b, "memory")
		b = append(b, 2, 0)
	}
	for _, k := range sortedKeys(m.Exports) {
		b = name(b, k)
		b = append(b, 0)
		b = uleb(b, m.Exports[k])
	}
	out = section(out, 7, b)
	b = uleb(nil, uint32(len(m.Funcs)))
	for _, f := range m.Funcs {
		body := append([]byte{0}, f.Body...) // no locals
		body = append(body, 0x0b)
		b = uleb(b, uint32(len(body)))
		b = append(b, body...)
	}
	return section(out, 10, b)
}

func sortedKeys(m map[string]uint32) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// Some function bodies.
var (
	// ReturnI32 returns the i32 constant 1.
	ReturnOne = []byte{0x41, 0x01}
	// Loop spins forever: loop br 0 end, then an unreachable result.
	Loop = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x00}
	// GrowLoop grows memory by a page until memory.grow fails (-1), then
	// traps with unreachable.
	GrowLoop = []byte{
		0x03, 0x40, // loop
		0x41, 0x01, // i32.const 1
		0x40, 0x00, // memory.grow 0
		0x41, 0x7f, // i32.const -1
		0x47,       // i32.ne
		0x0d, 0x00, // br_if 0
		0x0b, // end
		0x00, // unreachable
	}
)

// Guest returns a module with the ABI's exports whose sandflow_run body is
// run (which must leave an i32, or never return).
func Guest(run []byte, imports ...Import) []byte {
	n := uint32(len(imports))
	return Module{
		Imports: imports,
		Funcs: []Func{
			{Results: []byte{I32}, Body: ReturnOne},
			{Results: []byte{I32}, Body: run},
			{Results: []byte{I32}, Body: ReturnOne},
		},
		Exports: map[string]uint32{"sandflow_abi_version": n, "sandflow_run": n + 1, "sandflow_step": n + 2},
		Memory:  1,
	}.Bytes()
}

// I32Const is the instruction i32.const v.
func I32Const(v int32) []byte { return wasmbin.AppendSLEB([]byte{0x41}, int64(v)) }

// OpImport is the sandflow.op import, as a guest declares it.
var OpImport = Import{Module: "sandflow", Name: "op",
	Params: []byte{I32, I32, I32, I32, I32, I32, I32}, Results: []byte{I32}}

// CallOp is a body that calls import 0 (sandflow.op) with the name at
// namePtr, and drops the result.
func CallOp(kind, namePtr, nameLen int32) []byte {
	var b []byte
	for _, v := range []int32{kind, namePtr, nameLen, 0, 0, 0, 64} {
		b = append(b, I32Const(v)...)
	}
	return append(b, 0x10, 0x00, 0x1a) // call 0, drop
}

// CountTo is a loop that counts to n in memory at address 1024.
func CountTo(n int32) []byte {
	var b []byte
	b = append(b, 0x03, 0x40) // loop
	b = append(b, I32Const(1024)...)
	b = append(b, I32Const(1024)...)
	b = append(b, 0x28, 0x02, 0x00) // i32.load
	b = append(b, I32Const(1)...)
	b = append(b, 0x6a)             // i32.add
	b = append(b, 0x36, 0x02, 0x00) // i32.store
	b = append(b, I32Const(1024)...)
	b = append(b, 0x28, 0x02, 0x00) // i32.load
	b = append(b, I32Const(n)...)
	b = append(b, 0x49, 0x0d, 0x00, 0x0b) // i32.lt_u, br_if 0, end
	return b
}
