// Package wasmparse reads what the upload pipeline must check in a
// WebAssembly module before any engine sees it: its imports, its exports
// and their function types. It decodes only the type, import, function and
// export sections and skips the rest; every length is bounds-checked, since
// the bytes are untrusted.
package wasmparse

import (
	"errors"
	"fmt"
	"unicode/utf8"
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

type reader struct {
	b   []byte
	off int
}

func (r *reader) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.off, fmt.Sprintf(format, args...))
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, r.fail("u32 overflows")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.fail("u32 too long")
}

func (r *reader) bytes(n uint32) ([]byte, error) {
	if uint64(n) > uint64(len(r.b)-r.off) {
		return nil, r.fail("length %d runs past the end", n)
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", r.fail("name is not UTF-8")
	}
	return string(b), nil
}

// count reads a vector length and checks it against the bytes left, each
// entry taking at least min bytes, so a hostile count cannot make Parse
// allocate without bound.
func (r *reader) count(minEntry int) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minEntry) > uint64(len(r.b)-r.off) {
		return 0, r.fail("count %d is more than the section holds", n)
	}
	return n, nil
}

func (r *reader) limits() error {
	_, _, err := r.limitsValues()
	return err
}

// limitsValues reads limits and returns the minimum and the flag byte.
func (r *reader) limitsValues() (min uint32, flag byte, err error) {
	if flag, err = r.byte(); err != nil {
		return 0, 0, err
	}
	if min, err = r.u32(); err != nil {
		return 0, 0, err
	}
	if flag&1 != 0 {
		if _, err := r.u32(); err != nil {
			return 0, 0, err
		}
	}
	return min, flag, nil
}

func (r *reader) valtypes() ([]byte, error) {
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	b, err := r.bytes(n)
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
	r := &reader{b: b, off: 8}
	m := &Module{}
	var types []FuncType
	var funcTypes []uint32 // type index of every function, imported first
	lastID := byte(0)
	for r.off < len(b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(size)
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
		s := &reader{b: body}
		switch id {
		case 1: // type
			n, err := s.count(3)
			if err != nil {
				return nil, err
			}
			for range n {
				form, err := s.byte()
				if err != nil {
					return nil, err
				}
				if form != 0x60 {
					return nil, s.fail("type form %#x is not a function type", form)
				}
				ps, err := s.valtypes()
				if err != nil {
					return nil, err
				}
				rs, err := s.valtypes()
				if err != nil {
					return nil, err
				}
				types = append(types, FuncType{Params: ps, Results: rs})
			}
		case 2: // import
			n, err := s.count(4)
			if err != nil {
				return nil, err
			}
			for range n {
				mod, err := s.name()
				if err != nil {
					return nil, err
				}
				nm, err := s.name()
				if err != nil {
					return nil, err
				}
				kind, err := s.byte()
				if err != nil {
					return nil, err
				}
				imp := Import{Module: mod, Name: nm, Kind: kind}
				switch kind {
				case KindFunc:
					ti, err := s.u32()
					if err != nil {
						return nil, err
					}
					if int(ti) >= len(types) {
						return nil, s.fail("import %s.%s uses type %d of %d", mod, nm, ti, len(types))
					}
					imp.Type = &types[ti]
					funcTypes = append(funcTypes, ti)
				case KindTable:
					if _, err := s.byte(); err != nil {
						return nil, err
					}
					if err := s.limits(); err != nil {
						return nil, err
					}
				case KindMemory:
					if err := s.limits(); err != nil {
						return nil, err
					}
				case KindGlobal:
					if _, err := s.bytes(2); err != nil {
						return nil, err
					}
				case KindTag:
					if _, err := s.byte(); err != nil {
						return nil, err
					}
					if _, err := s.u32(); err != nil {
						return nil, err
					}
				default:
					return nil, s.fail("import %s.%s has unknown kind %d", mod, nm, kind)
				}
				m.Imports = append(m.Imports, imp)
			}
		case 3: // function
			n, err := s.count(1)
			if err != nil {
				return nil, err
			}
			for range n {
				ti, err := s.u32()
				if err != nil {
					return nil, err
				}
				if int(ti) >= len(types) {
					return nil, s.fail("function uses type %d of %d", ti, len(types))
				}
				funcTypes = append(funcTypes, ti)
			}
		case 4: // table: reftype, limits
			n, err := s.count(3)
			if err != nil {
				return nil, err
			}
			for range n {
				if _, err := s.byte(); err != nil {
					return nil, err
				}
				min, _, err := s.limitsValues()
				if err != nil {
					return nil, err
				}
				if min > MaxTableElements {
					return nil, s.fail("table of %d elements is over the limit of %d", min, MaxTableElements)
				}
			}
		case 5: // memory
			n, err := s.count(2)
			if err != nil {
				return nil, err
			}
			for i := range n {
				min, flag, err := s.limitsValues()
				if err != nil {
					return nil, err
				}
				if flag&^1 != 0 {
					return nil, s.fail("memory flags %#x: shared and 64-bit memories are not supported", flag)
				}
				if min > 65536 {
					return nil, s.fail("memory of %d pages is over the 32-bit maximum of 65536", min)
				}
				if i == 0 {
					m.MemoryMinPages = min
				}
			}
		case 6, 9, 10, 11, 13: // global, element, code, data, tag
			// Their entries are not needed here, but an engine allocates by
			// a vector's count before reading it: a count the section cannot
			// hold must not reach one.
			if _, err := s.count(1); err != nil {
				return nil, err
			}
		case 12: // data count
			n, err := s.u32()
			if err != nil {
				return nil, err
			}
			if int(n) > len(b) {
				return nil, s.fail("data count %d is more than the module holds", n)
			}
		case 7: // export
			n, err := s.count(3)
			if err != nil {
				return nil, err
			}
			for range n {
				nm, err := s.name()
				if err != nil {
					return nil, err
				}
				kind, err := s.byte()
				if err != nil {
					return nil, err
				}
				idx, err := s.u32()
				if err != nil {
					return nil, err
				}
				e := Export{Name: nm, Kind: kind, Index: idx}
				if kind == KindFunc {
					if int(idx) >= len(funcTypes) {
						return nil, s.fail("export %q names function %d of %d", nm, idx, len(funcTypes))
					}
					e.Type = &types[funcTypes[idx]]
				}
				m.Exports = append(m.Exports, e)
			}
		}
	}
	return m, nil
}
