package wasmparse

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/internal/wasmbin"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// nested returns a sandflow_run body with depth blocks nested around
// i32.const 1.
func nested(depth int) []byte {
	b := bytes.Repeat([]byte{0x02, 0x7f}, depth) // block (result i32)
	b = append(b, 0x41, 0x01)
	return append(b, bytes.Repeat([]byte{0x0b}, depth)...)
}

// withCode replaces a wasmtest module's code section (its last) by one
// holding the given raw bodies (locals vector, instructions and end
// included) for the module's three functions.
func withCode(t *testing.T, m []byte, bodies ...[]byte) []byte {
	t.Helper()
	r := &wasmbin.Reader{B: m, Off: 8, Err: ErrMalformed}
	for r.Off < len(m) {
		start := r.Off
		id, _ := r.Byte()
		size, _ := r.U32()
		if err := r.Skip(int(size)); err != nil {
			t.Fatal(err)
		}
		if id == 10 {
			var sec []byte
			sec = wasmbin.AppendULEB(sec, uint64(len(bodies)))
			for _, b := range bodies {
				sec = wasmbin.AppendULEB(sec, uint64(len(b)))
				sec = append(sec, b...)
			}
			out := append(append([]byte(nil), m[:start]...), 10)
			out = wasmbin.AppendULEB(out, uint64(len(sec)))
			return append(out, sec...)
		}
	}
	t.Fatal("no code section")
	return nil
}

func limitOf(t *testing.T, err error) *LimitError {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want a *LimitError", err)
	}
	return le
}

// Regression: a module of 100,000 nested blocks took over two minutes of
// CPU to compile, and a million were still compiling, at 2 GB, minutes
// after the client had gone. Parse refuses it in milliseconds.
func TestNestedBlocksRefusedFast(t *testing.T) {
	m := wasmtest.Guest(nested(100_000))
	start := time.Now()
	_, err := Parse(m)
	took := time.Since(start)
	le := limitOf(t, err)
	if le.Limit != "block_depth" || le.Max != MaxBlockDepth || le.Func != 1 {
		t.Errorf("limit %+v, want block_depth in function 1", le)
	}
	if took > time.Second {
		t.Errorf("refusing took %s", took)
	}
	// At the limit it passes.
	if _, err := Parse(wasmtest.Guest(nested(MaxBlockDepth))); err != nil {
		t.Errorf("%d nested blocks: %v", MaxBlockDepth, err)
	}
}

func TestStructuralLimits(t *testing.T) {
	one := []byte{0x00, 0x41, 0x01, 0x0b} // no locals; i32.const 1; end
	locals := func(n uint32) []byte {
		b := []byte{0x02}
		b = wasmbin.AppendULEB(b, uint64(n/2))
		b = append(b, 0x7f)
		b = wasmbin.AppendULEB(b, uint64(n-n/2))
		b = append(b, 0x7e)
		return append(b, 0x41, 0x01, 0x0b)
	}
	big := func(size int) []byte {
		b := []byte{0x00}
		b = append(b, bytes.Repeat([]byte{0x01}, size-4)...) // nop
		return append(b, 0x41, 0x01, 0x0b)
	}
	base := wasmtest.Guest(wasmtest.ReturnOne)
	for _, c := range []struct {
		name   string
		module []byte
		limit  string // "" for a module within the limits
	}{
		{"locals at the limit", withCode(t, base, one, locals(MaxLocals), one), ""},
		{"locals over", withCode(t, base, one, locals(MaxLocals+1), one), "locals"},
		{"body at the limit", withCode(t, base, one, big(MaxFunctionSize), one), ""},
		{"body over", withCode(t, base, one, big(MaxFunctionSize+1), one), "function_size"},
		{"too many functions", manyFunctions(MaxFunctions + 1), "functions"},
		{"too many params", wasmtest.Module{Funcs: []wasmtest.Func{{Params: bytes.Repeat([]byte{wasmtest.I32}, MaxParams+1), Body: nil}}}.Bytes(), "params"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.module)
			if c.limit == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if le := limitOf(t, err); le.Limit != c.limit {
				t.Errorf("limit %q, want %q (%v)", le.Limit, c.limit, err)
			}
		})
	}
}

// manyFunctions is a module whose function section declares n functions of
// type 0 (and has no code: the count is refused first).
func manyFunctions(n int) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, 1, 4, 1, 0x60, 0, 0) // one type: () -> ()
	sec := wasmbin.AppendULEB(nil, uint64(n))
	sec = append(sec, make([]byte, n)...)
	m = append(m, 3)
	m = wasmbin.AppendULEB(m, uint64(len(sec)))
	return append(m, sec...)
}
