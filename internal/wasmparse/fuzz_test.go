package wasmparse

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/sandflow/sandflow/internal/wasmtest"
)

// Seed corpus: testdata/fuzz/FuzzParse/ holds handwritten modules (the
// component-model header, a huge LEB count, an overflowing LEB, sections
// out of order or twice, sizes past the end, every import kind) and a
// snapshot of a valid guest; fuzzSeeds adds guests built with wasmtest and
// truncations of them, so that they follow wasmtest when it changes.

// fuzzSeeds returns modules built from code for FuzzParse.
func fuzzSeeds() [][]byte {
	valid := wasmtest.Guest(wasmtest.ReturnOne)
	withImports := wasmtest.Guest(wasmtest.ReturnOne,
		wasmtest.Import{Module: "sandflow", Name: "op", Params: bytes.Repeat([]byte{wasmtest.I32}, 7), Results: []byte{wasmtest.I32}},
		wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "fd_write", Params: bytes.Repeat([]byte{wasmtest.I32}, 4), Results: []byte{wasmtest.I32}},
	)
	seeds := [][]byte{valid, withImports}
	for _, n := range []int{9, 10, 12, len(valid) / 2, len(valid) - 1} {
		seeds = append(seeds, valid[:n])
	}
	return seeds
}

var (
	fuzzRTOnce sync.Once
	fuzzRT     wazero.Runtime
)

// fuzzRuntime is a wazero runtime used as a reference decoder: what it
// accepts is a real module, which Parse must read the same way.
func fuzzRuntime() wazero.Runtime {
	fuzzRTOnce.Do(func() {
		fuzzRT = wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter())
	})
	return fuzzRT
}

// FuzzParse: Parse never panics; it fails only with ErrNotWasm or
// ErrMalformed; on success every function import and export has a type;
// and when Parse accepts a module that wazero accepts too, both read it
// the same way (same function imports, same function and memory exports,
// same signatures), so the upload check sees every import a guest really
// has and the types the engine will call.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		m, err := Parse(b)
		if !bytes.Equal(in, b) {
			t.Fatalf("Parse changed its input")
		}
		if err != nil {
			if m != nil {
				t.Errorf("Parse returned a module with error %v", err)
			}
			if !errors.Is(err, ErrNotWasm) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrLimit) {
				t.Fatalf("Parse error %v is not ErrNotWasm, ErrMalformed or ErrLimit", err)
			}
		} else {
			checkTyped(t, m)
		}

		if err != nil || !wazeroSafe(b) {
			return
		}
		ctx := context.Background()
		cm, werr := fuzzRuntime().CompileModule(ctx, b)
		if werr != nil {
			return // Parse is lenient: the engine refuses what it does not check
		}
		defer cm.Close(ctx)
		compareWithWazero(t, m, cm)
	})
}

// wazeroSafe reports whether wazero can be given the bytes of a module
// Parse accepted without it preallocating by a hostile count: wazero sizes
// vectors and names by the counts it reads before reading the entries,
// and Parse does not look into the sections that hold them. In the host
// that is a bug: see TestRegressionAddPluginHugeVectorCount in package
// host.
func wazeroSafe(b []byte) bool {
	r := &reader{B: b, Off: 8, Err: ErrMalformed}
	for r.Off < len(b) {
		id, _ := r.Byte()
		size, err := r.U32()
		if err != nil {
			return false
		}
		body, err := r.Bytes(int(size))
		if err != nil {
			return false
		}
		s := &reader{B: body, Err: ErrMalformed}
		switch id {
		case 0: // wazero allocates the name's length
			n, err := s.U32()
			if err != nil {
				return false
			}
			if _, err := s.Bytes(int(n)); err != nil {
				return false
			}
		case 4, 5, 6, 13:
			if _, err := s.Count(1); err != nil {
				return false
			}
		case 9, 11:
			return false // vectors inside entries
		case 10:
			n, err := s.Count(1)
			if err != nil {
				return false
			}
			for range n {
				sz, err := s.U32()
				if err != nil {
					return false
				}
				fb, err := s.Bytes(int(sz))
				if err != nil {
					return false
				}
				f := &reader{B: fb, Err: ErrMalformed}
				decls, err := f.Count(2)
				if err != nil {
					return false
				}
				var locals uint64
				for range decls {
					k, err := f.U32()
					if err != nil {
						return false
					}
					locals += uint64(k)
					if _, err := f.Byte(); err != nil {
						return false
					}
				}
				if locals > 1<<16 {
					return false
				}
			}
		}
	}
	return true
}

func checkTyped(t *testing.T, m *Module) {
	t.Helper()
	for i, imp := range m.Imports {
		if imp.Kind == KindFunc && imp.Type == nil {
			t.Fatalf("function import %d (%s.%s) has no type", i, imp.Module, imp.Name)
		}
		if imp.Kind != KindFunc && imp.Type != nil {
			t.Fatalf("import %d (%s.%s) of kind %d has a function type", i, imp.Module, imp.Name, imp.Kind)
		}
	}
	for i, e := range m.Exports {
		if e.Kind == KindFunc && e.Type == nil {
			t.Fatalf("function export %d (%q) has no type", i, e.Name)
		}
		if got, ok := m.Export(e.Name); !ok || got != m.Exports[firstExport(m, e.Name)] {
			t.Fatalf("Export(%q) does not find the first export of that name", e.Name)
		}
	}
}

func firstExport(m *Module, name string) int {
	for i, e := range m.Exports {
		if e.Name == name {
			return i
		}
	}
	return -1
}

func compareWithWazero(t *testing.T, m *Module, cm wazero.CompiledModule) {
	t.Helper()
	var funcImports []Import
	memImports := 0
	for _, imp := range m.Imports {
		switch imp.Kind {
		case KindFunc:
			funcImports = append(funcImports, imp)
		case KindMemory:
			memImports++
		}
	}
	wi := cm.ImportedFunctions()
	if len(wi) != len(funcImports) {
		t.Fatalf("wazero sees %d function imports, Parse %d", len(wi), len(funcImports))
	}
	for i, d := range wi {
		mod, name, _ := d.Import()
		got := funcImports[i]
		if got.Module != mod || got.Name != name {
			t.Fatalf("function import %d: wazero %s.%s, Parse %s.%s", i, mod, name, got.Module, got.Name)
		}
		if !bytes.Equal(got.Type.Params, d.ParamTypes()) || !bytes.Equal(got.Type.Results, d.ResultTypes()) {
			t.Fatalf("function import %s.%s: wazero type %x -> %x, Parse %x -> %x", mod, name, d.ParamTypes(), d.ResultTypes(), got.Type.Params, got.Type.Results)
		}
	}
	if n := len(cm.ImportedMemories()); n != memImports {
		t.Fatalf("wazero sees %d memory imports, Parse %d", n, memImports)
	}

	wf := cm.ExportedFunctions()
	wm := cm.ExportedMemories()
	nf, nm := 0, 0
	for _, e := range m.Exports {
		switch e.Kind {
		case KindFunc:
			nf++
			d, ok := wf[e.Name]
			if !ok {
				t.Fatalf("Parse has function export %q, wazero does not", e.Name)
			}
			if !bytes.Equal(e.Type.Params, d.ParamTypes()) || !bytes.Equal(e.Type.Results, d.ResultTypes()) {
				t.Fatalf("function export %q: wazero type %x -> %x, Parse %x -> %x", e.Name, d.ParamTypes(), d.ResultTypes(), e.Type.Params, e.Type.Results)
			}
			if d.Index() != e.Index {
				t.Fatalf("function export %q: wazero index %d, Parse %d", e.Name, d.Index(), e.Index)
			}
		case KindMemory:
			nm++
			if _, ok := wm[e.Name]; !ok {
				t.Fatalf("Parse has memory export %q, wazero does not", e.Name)
			}
		}
	}
	if nf != len(wf) || nm != len(wm) {
		t.Fatalf("wazero has %d function and %d memory exports, Parse %d and %d", len(wf), len(wm), nf, nm)
	}
}
