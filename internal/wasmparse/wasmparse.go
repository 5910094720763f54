// Package wasmparse reads what the upload pipeline must check in a
// WebAssembly module before any engine sees it: its imports, its exports
// and their function types, and that it is within the structural limits
// browsers set (limits.go). It decodes the type, import, function and
// export sections, walks the code section's bodies for their sizes, locals
// and block nesting, and skips the rest; every length is bounds-checked,
// since the bytes are untrusted.
package wasmparse

import (
	"errors"
	"fmt"

	"github.com/sandflow/sandflow/internal/wasmbin"
)

var (
	// ErrNotWasm is returned when the bytes do not start with the wasm magic.
	ErrNotWasm = errors.New("not a WebAssembly module")
	// ErrMalformed is returned when the module's structure is broken.
	ErrMalformed = errors.New("malformed WebAssembly module")
)

// External kinds.
const (
	KindFunc   byte = 0
	KindTable  byte = 1
	KindMemory byte = 2
	KindGlobal byte = 3
	KindTag    byte = 4
)

// Value types.
const (
	I32 byte = 0x7f
	I64 byte = 0x7e
	F32 byte = 0x7d
	F64 byte = 0x7c
)

// FuncType is a function signature.
type FuncType struct {
	Params, Results []byte
}

// Import is one import entry.
type Import struct {
	Module, Name string
	Kind         byte
	// Type is the function type for a function import.
	Type *FuncType
}

// Export is one export entry.
type Export struct {
	Name  string
	Kind  byte
	Index uint32
	// Type is the function type for a function export.
	Type *FuncType
}

// Module is what Parse found.
type Module struct {
	Imports []Import
	Exports []Export
	// MemoryMinPages is the initial size of the defined memory, in 64 KiB
	// pages (0 when the module defines none).
	MemoryMinPages uint32
}

// MaxTableElements bounds a table's initial size: an engine allocates it
// whole when it instantiates the module.
const MaxTableElements = 1 << 20

// Export returns the export with the given name.
func (m *Module) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

// reader reads with the package's sentinel for malformed input.
type reader = wasmbin.Reader

// valtypes reads a vector of one-byte value types.
func valtypes(r *reader) ([]byte, error) {
	n, err := r.Count(1)
	if err != nil {
		return nil, err
	}
	b, err := r.Bytes(int(n))
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// Parse reads a module's imports and exports.
func Parse(b []byte) (*Module, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, ErrNotWasm
	}
	if b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, fmt.Errorf("%w: version %x, expected 1 (a component or a future format)", ErrMalformed, b[4:8])
	}
	r := &reader{B: b, Off: 8, Err: ErrMalformed}
	m := &Module{}
	var types []FuncType
	var funcTypes []uint32 // type index of every function, imported first
	lastID := byte(0)
	for r.Off < len(b) {
		id, err := r.Byte()
		if err != nil {
			return nil, err
		}
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		body, err := r.Bytes(int(size))
		if err != nil {
			return nil, err
		}
		if id != 0 && id != 12 {
			// Known sections come in order, once each (12, data count, sits
			// between import-ish and code sections; leave it out of the check).
			if id <= lastID && id < 12 {
				return nil, fmt.Errorf("%w: section %d after section %d", ErrMalformed, id, lastID)
			}
			if id < 12 {
				lastID = id
			}
		}
		s := &reader{B: body, Err: ErrMalformed}
		switch id {
		case 1: // type
			n, err := s.Count(3)
			if err != nil {
				return nil, err
			}
			if err := overLimit("types", uint64(n), MaxTypes, -1); err != nil {
				return nil, err
			}
			for range n {
				form, err := s.Byte()
				if err != nil {
					return nil, err
				}
				if form != 0x60 {
					return nil, s.Fail("type form %#x is not a function type", form)
				}
				ps, err := valtypes(s)
				if err != nil {
					return nil, err
				}
				if err := overLimit("params", uint64(len(ps)), MaxParams, -1); err != nil {
					return nil, err
				}
				rs, err := valtypes(s)
				if err != nil {
					return nil, err
				}
				if err := overLimit("results", uint64(len(rs)), MaxResults, -1); err != nil {
					return nil, err
				}
				types = append(types, FuncType{Params: ps, Results: rs})
			}
		case 2: // import
			n, err := s.Count(4)
			if err != nil {
				return nil, err
			}
			if err := overLimit("imports", uint64(n), MaxImports, -1); err != nil {
				return nil, err
			}
			for range n {
				mod, err := s.Name()
				if err != nil {
					return nil, err
				}
				nm, err := s.Name()
				if err != nil {
					return nil, err
				}
				kind, err := s.Byte()
				if err != nil {
					return nil, err
				}
				imp := Import{Module: mod, Name: nm, Kind: kind}
				switch kind {
				case KindFunc:
					ti, err := s.U32()
					if err != nil {
						return nil, err
					}
					if int(ti) >= len(types) {
						return nil, s.Fail("import %s.%s uses type %d of %d", mod, nm, ti, len(types))
					}
					imp.Type = &types[ti]
					funcTypes = append(funcTypes, ti)
				case KindTable:
					if _, err := s.Byte(); err != nil {
						return nil, err
					}
					if _, _, err := s.Limits(); err != nil {
						return nil, err
					}
				case KindMemory:
					if _, _, err := s.Limits(); err != nil {
						return nil, err
					}
				case KindGlobal:
					if _, err := s.Bytes(int(2)); err != nil {
						return nil, err
					}
				case KindTag:
					if _, err := s.Byte(); err != nil {
						return nil, err
					}
					if _, err := s.U32(); err != nil {
						return nil, err
					}
				default:
					return nil, s.Fail("import %s.%s has unknown kind %d", mod, nm, kind)
				}
				m.Imports = append(m.Imports, imp)
			}
		case 3: // function
			n, err := s.Count(1)
			if err != nil {
				return nil, err
			}
			if err := overLimit("functions", uint64(len(funcTypes))+uint64(n), MaxFunctions, -1); err != nil {
				return nil, err
			}
			for range n {
				ti, err := s.U32()
				if err != nil {
					return nil, err
				}
				if int(ti) >= len(types) {
					return nil, s.Fail("function uses type %d of %d", ti, len(types))
				}
				funcTypes = append(funcTypes, ti)
			}
		case 4: // table: reftype, limits
			n, err := s.Count(3)
			if err != nil {
				return nil, err
			}
			for range n {
				if _, err := s.Byte(); err != nil {
					return nil, err
				}
				min, _, err := s.Limits()
				if err != nil {
					return nil, err
				}
				if min > MaxTableElements {
					return nil, s.Fail("table of %d elements is over the limit of %d", min, MaxTableElements)
				}
			}
		case 5: // memory
			n, err := s.Count(2)
			if err != nil {
				return nil, err
			}
			for i := range n {
				min, flag, err := s.Limits()
				if err != nil {
					return nil, err
				}
				if flag&^1 != 0 {
					return nil, s.Fail("memory flags %#x: shared and 64-bit memories are not supported", flag)
				}
				if min > 65536 {
					return nil, s.Fail("memory of %d pages is over the 32-bit maximum of 65536", min)
				}
				if i == 0 {
					m.MemoryMinPages = min
				}
			}
		case 10: // code
			if err := code(s); err != nil {
				return nil, err
			}
		case 6, 9, 11, 13: // global, element, data, tag
			// Their entries are not needed here, but an engine allocates by
			// a vector's count before reading it: a count the section cannot
			// hold must not reach one.
			n, err := s.Count(1)
			if err != nil {
				return nil, err
			}
			limit, max := map[byte]string{6: "globals", 9: "element_segments", 11: "data_segments", 13: "tags"}[id], uint64(MaxGlobals)
			switch id {
			case 9:
				max = MaxElemSegments
			case 11:
				max = MaxDataSegments
			}
			if err := overLimit(limit, uint64(n), max, -1); err != nil {
				return nil, err
			}
		case 12: // data count
			n, err := s.U32()
			if err != nil {
				return nil, err
			}
			if int(n) > len(b) {
				return nil, s.Fail("data count %d is more than the module holds", n)
			}
		case 7: // export
			n, err := s.Count(3)
			if err != nil {
				return nil, err
			}
			if err := overLimit("exports", uint64(n), MaxExports, -1); err != nil {
				return nil, err
			}
			for range n {
				nm, err := s.Name()
				if err != nil {
					return nil, err
				}
				kind, err := s.Byte()
				if err != nil {
					return nil, err
				}
				idx, err := s.U32()
				if err != nil {
					return nil, err
				}
				e := Export{Name: nm, Kind: kind, Index: idx}
				if kind == KindFunc {
					if int(idx) >= len(funcTypes) {
						return nil, s.Fail("export %q names function %d of %d", nm, idx, len(funcTypes))
					}
					e.Type = &types[funcTypes[idx]]
				}
				m.Exports = append(m.Exports, e)
			}
		}
	}
	return m, nil
}
