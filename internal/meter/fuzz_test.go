package meter_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/sandflow/sandflow/internal/meter"
	"github.com/sandflow/sandflow/internal/wasmparse"
)

// Seed corpus: testdata/fuzz/FuzzInstrument/ holds the modules of the
// tests in this package and truncations of them (written by
// go test -run TestWriteFuzzSeeds -meter.write-seeds), and the inputs the
// fuzzer found failing; fuzzSeeds adds the same modules from code, so the
// seeds follow the tests when they change.

var writeSeeds = flag.Bool("meter.write-seeds", false, "write the seed corpus of FuzzInstrument to testdata")

// seedModules returns the test modules by name.
func seedModules() map[string][]byte {
	seeds := map[string][]byte{
		"nested-loops":        nestedLoops(),
		"multi-value":         multiValue(),
		"dispatch":            dispatch(),
		"start":               withStart(),
		"imports":             withImports(),
		"opcode-zoo":          opcodeZoo(),
		"named":               named(),
		"exceptions":          exceptions(),
		"tail-calls":          tailCalls(),
		"table-initialiser":   tableInitialiser(),
		"forged-counter":      forgedCounter(),
		"real-guest-shape":    realGuestShape(),
		"instrumented-nested": mustInstrument(nestedLoops()),
	}
	for name, m := range sectionless() {
		seeds["sectionless-"+name] = m
	}
	for name, m := range spinners() {
		seeds["spin-"+name] = m
	}
	return seeds
}

// realGuestShape is a small module shaped like the Go toolchain's output:
// WASI imports, a memory, globals, a table filled by an element segment,
// a name section.
func realGuestShape() []byte {
	return module(
		typeSec(functype(ops(tI32, tI32, tI32, tI32), ops(tI32)), functype(nil, nil), functype(ops(tI32), ops(tI32))),
		importSec(importFunc("wasi_snapshot_preview1", "fd_write", 0)),
		funcSec(1, 2, 2),
		tableSec(3),
		memSec(1),
		globalSec(global(tI32, true, i32c(65536)), global(tI64, true, i64c(0))),
		exportSec(exportFunc("_initialize", 1), exportFunc("run", 2), export("memory", kMemory, 0)),
		elemSec(cat(u32(0), expr(i32c(1)), funcIdxs(3))),
		codeSec(
			fn(nil),
			fn([]byte{tI32}, lget(0), i32c(1), callIndirect(2, 0)),
			fn(nil, ops(opLoop, tVoid), lget(0), i32c(1), ops(opI32Sub), ltee(0), brIf(0), ops(opEnd), lget(0)),
		),
		dataSec(cat(u32(0), expr(i32c(8)), str("go"))),
		customSec("name", nameSubsection(1, nameMap(naming{0, "runtime.fd_write"}, naming{1, "_rt0"}, naming{2, "main.run"}, naming{3, "main.loop"}))),
	)
}

func mustInstrument(wasm []byte) []byte {
	out, err := meter.Instrument(wasm)
	if err != nil {
		panic(err)
	}
	return out
}

// fuzzSeeds returns the seed modules and truncations of them.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	modules := seedModules()
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		m := modules[name]
		seeds = append(seeds, m)
		for _, n := range []int{9, 10, len(m) / 2, len(m) - 1} {
			if n < len(m) {
				seeds = append(seeds, m[:n])
			}
		}
	}
	return seeds
}

// TestWriteFuzzSeeds writes the seed corpus, with -meter.write-seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -meter.write-seeds to write the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzInstrument")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, m := range seedModules() {
		name = "seed-" + sanitize(name)
		write(name, m)
		write(name+"-half", m[:len(m)/2])
		write(name+"-less-one", m[:len(m)-1])
	}
}

// sanitize makes a seed's name a file name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, s)
}

var (
	fuzzRTOnce sync.Once
	fuzzRT     wazero.Runtime
)

// fuzzRuntime is the reference decoder and validator: wazero with the
// features the host enables (its defaults), interpreted since only
// compiling is needed and the interpreter validates exactly as the
// compiler does.
func fuzzRuntime() wazero.Runtime {
	fuzzRTOnce.Do(func() {
		fuzzRT = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	})
	return fuzzRT
}

// compile compiles wasm with the reference runtime.
func compile(wasm []byte) (wazero.CompiledModule, error) {
	return fuzzRuntime().CompileModule(ctx, wasm)
}

// maxFuzzInput bounds what is handed to wazero.
const maxFuzzInput = 64 << 10

// Growth bound: a loop is at least 2 bytes (loop, block type) and gets a
// countdown of 16 + 4k + t bytes, where k and t are the LEB lengths of the
// countdown global's and the tick's indices; both are below the module's
// length, so for modules under 2 MiB k, t <= 3 and a loop grows at most
// 2 -> 33 bytes. Remapped indices grow by at most a byte (from at least
// two), and the added type, import and global take a few dozen bytes.
const (
	maxGrowthFactor = 17
	maxGrowthSlack  = 512
)

// FuzzInstrument: Instrument never panics and fails only with
// ErrUnsupported; it leaves its input alone, is deterministic, and grows a
// module by a bounded factor. For a module of up to 64 KiB that wasmparse
// and wazeroSafe accept (so that wazero cannot be made to allocate without
// bound), when Instrument succeeds, wazero must accept the output exactly
// when it accepts the input; and when it does, the output must have the
// input's exports (names, types, and debug names if the name section is
// well formed) and its imports plus the tick, and must itself be
// instrumentable. (An input wazero refuses only for a malformed custom
// section may become valid: the rewriter drops a name section it cannot
// read, and the WebAssembly core specification says custom sections must not
// invalidate a module.)
func FuzzInstrument(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, err := meter.Instrument(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("Instrument modified its input")
		}
		if err != nil {
			if !errors.Is(err, meter.ErrUnsupported) {
				t.Fatalf("Instrument failed with %v, not ErrUnsupported", err)
			}
			if out != nil {
				t.Fatal("Instrument returned output with an error")
			}
			return
		}
		if len(out) > maxGrowthFactor*len(in)+maxGrowthSlack {
			t.Fatalf("Instrument grew %d bytes to %d", len(in), len(out))
		}
		again, err := meter.Instrument(in)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("Instrument is not deterministic (%v)", err)
		}
		if len(in) > maxFuzzInput {
			return
		}
		if _, err := wasmparse.Parse(in); err != nil || !wazeroSafe(in) {
			return
		}
		ocm, inErr := compile(in)
		if inErr == nil {
			defer ocm.Close(ctx)
		}
		if _, err := wasmparse.Parse(out); err != nil || !wazeroSafe(out) {
			if inErr == nil {
				t.Fatalf("wazero accepts the input, but the output is malformed: %v", err)
			}
			return
		}
		icm, outErr := compile(out)
		if outErr == nil {
			defer icm.Close(ctx)
		}
		switch {
		case inErr == nil && outErr != nil:
			t.Fatalf("wazero accepts the input but refuses the output: %v", outErr)
		case inErr != nil && outErr == nil:
			if cm, err := compile(stripCustom(in)); err == nil {
				cm.Close(ctx)
				return // only a custom section made the input invalid
			}
			t.Fatalf("wazero refuses the input (%v) but accepts the output", inErr)
		case inErr == nil:
			checkSameInterface(t, ocm, icm, namesWellFormed(in))
			// Its own output exports the mutable globals under the
			// reserved names, so it is refused for that alone.
			if _, err := meter.Instrument(out); err != nil && !errors.Is(err, meter.ErrReservedExport) {
				t.Fatalf("Instrument refuses its own (valid) output: %v", err)
			}
		}
	})
}

// stripCustom returns wasm without its custom sections (wasm has sound
// section framing: wasmparse accepted it).
func stripCustom(wasm []byte) []byte {
	out := bytes.Clone(wasm[:8])
	r := &rd{b: wasm, off: 8}
	for r.ok() && r.off < len(wasm) {
		start := r.off
		id := r.byte()
		r.bytes(r.u32())
		if r.ok() && id != secCustom {
			out = append(out, wasm[start:r.off]...)
		}
	}
	return out
}

// wazeroSafe reports whether wazero can decode wasm without allocating by
// an unchecked count. wasmparse bounds the section-level vector counts;
// wazero also allocates by the counts inside element and data segments,
// by function body sizes and local counts, and by lengths in custom
// sections, which this checks. It reports false for what it cannot read
// (so the fuzzer skips the comparison for those inputs).
func wazeroSafe(wasm []byte) bool {
	limit := uint64(len(wasm))
	r := &rd{b: wasm, off: 8}
	for r.ok() && r.off < len(wasm) {
		id := r.byte()
		s := &rd{b: r.bytes(r.u32())}
		switch id {
		case secCustom:
			l := s.u32()
			if uint64(l) > limit {
				return false
			}
			if string(s.bytes(l)) == "name" && !nameSafe(s, limit) {
				return false
			}
		case secElement:
			n := s.u32()
			for i := uint32(0); i < n && s.ok(); i++ {
				flags := s.u32()
				if flags > 7 {
					break // wazero stops here
				}
				if flags&3 == 2 {
					s.u32()
				}
				if flags&1 == 0 && !s.constExpr() {
					return false
				}
				if flags&3 != 0 {
					if b := s.byte(); b == 0x63 || b == 0x64 {
						s.leb()
					}
				}
				count := s.u32()
				if uint64(count) > limit {
					return false
				}
				for j := uint32(0); j < count && s.ok(); j++ {
					if flags&4 != 0 {
						if !s.constExpr() {
							return false
						}
					} else {
						s.u32()
					}
				}
			}
		case secCode:
			n := s.u32()
			for i := uint32(0); i < n && s.ok(); i++ {
				size := s.u32()
				if int(size) > len(s.b)-s.off {
					return false
				}
				body := &rd{b: s.bytes(size)}
				groups := body.u32()
				var sum uint64
				for j := uint32(0); j < groups && body.ok(); j++ {
					sum += uint64(body.u32())
					if b := body.byte(); b == 0x63 || b == 0x64 {
						body.leb()
					}
				}
				if sum > 1<<16 {
					return false
				}
			}
		case secData:
			n := s.u32()
			for i := uint32(0); i < n && s.ok(); i++ {
				flags := s.u32()
				if flags == 2 {
					s.u32()
				}
				if flags != 1 && !s.constExpr() {
					return false
				}
				size := s.u32()
				if uint64(size) > limit {
					return false
				}
				s.bytes(size)
			}
		}
	}
	return true
}

// nameSafe follows wazero's reading of a name section: it reads the known
// subsections by their contents, not their sizes, but counts down the
// section's length by the sizes, so it can read on past the section, where
// nothing bounds what it reads. That, and any count or length over limit,
// is unsafe.
func nameSafe(s *rd, limit uint64) bool {
	left := int64(len(s.b) - s.off)
	str := func() bool {
		l := s.u32()
		s.bytes(l)
		return uint64(l) <= limit
	}
	for left > 0 {
		id := s.byte()
		start := s.off
		size := s.u32()
		left -= 1 + int64(s.off-start)
		switch id {
		case 0:
			if !str() {
				return false
			}
		case 1, 2:
			n := s.u32()
			if uint64(n) > limit {
				return false
			}
			for i := uint32(0); i < n && s.ok(); i++ {
				s.u32()
				if id == 1 {
					if !str() {
						return false
					}
					continue
				}
				m := s.u32()
				if uint64(m) > limit {
					return false
				}
				for j := uint32(0); j < m && s.ok(); j++ {
					s.u32()
					if !str() {
						return false
					}
				}
			}
		default:
			s.bytes(size)
		}
		left -= int64(size)
		if !s.ok() {
			return false // read past the section
		}
	}
	return left == 0 // else wazero's unsigned count wraps and reads on
}

// namesWellFormed reports whether wasm's name section, if any, is well
// formed in the parts wazero reads (module, function and local names):
// Instrument drops a name section it cannot read, and wazero reads one
// by its contents, past the subsection sizes.
func namesWellFormed(wasm []byte) bool {
	r := &rd{b: wasm, off: 8}
	for r.ok() && r.off < len(wasm) {
		id := r.byte()
		s := &rd{b: r.bytes(r.u32())}
		if id != secCustom || string(s.bytes(s.u32())) != "name" {
			continue
		}
		for s.ok() && s.off < len(s.b) {
			sid := s.byte()
			sub := &rd{b: s.bytes(s.u32())}
			str := func() { sub.bytes(sub.u32()) }
			switch sid {
			case 0:
				str()
			case 1, 2:
				n := sub.u32()
				for i := uint32(0); i < n && sub.ok(); i++ {
					sub.u32()
					if sid == 1 {
						str()
						continue
					}
					m := sub.u32()
					for j := uint32(0); j < m && sub.ok(); j++ {
						sub.u32()
						str()
					}
				}
			default:
				continue
			}
			if !sub.ok() || sub.off != len(sub.b) {
				return false
			}
		}
		if !s.ok() {
			return false
		}
	}
	return r.ok()
}

// rd reads a module, remembering the first failure.
type rd struct {
	b   []byte
	off int
	bad bool
}

func (r *rd) ok() bool { return !r.bad }

func (r *rd) byte() byte {
	if r.bad || r.off >= len(r.b) {
		r.bad = true
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *rd) leb() uint64 {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.bad = true
	return 0
}

func (r *rd) u32() uint32 {
	v := r.leb()
	if v > 0xffffffff {
		r.bad = true
		return 0
	}
	return uint32(v)
}

func (r *rd) bytes(n uint32) []byte {
	if r.bad || int(n) > len(r.b)-r.off {
		r.bad = true
		return nil
	}
	r.off += int(n)
	return r.b[r.off-int(n) : r.off]
}

// constExpr skips a constant expression, reporting false for one it cannot
// read.
func (r *rd) constExpr() bool {
	for r.ok() {
		switch op := r.byte(); op {
		case opEnd:
			return r.ok()
		case opI32Const, opI64Const, opGlobalGet, opRefFunc, opRefNull:
			r.leb()
		case opF32Const:
			r.bytes(4)
		case opF64Const:
			r.bytes(8)
		case opI32Add, opI32Sub, opI32Mul, opI64Add, 0x7d, opI64Mul:
		case opSIMD:
			if r.u32() != 12 {
				return false
			}
			r.bytes(16)
		default:
			return false
		}
	}
	return false
}

// TestFuzzSeedsCommitted checks the committed seed corpus holds every seed
// module, so that fuzzing starts from the tests' modules even if fuzzSeeds
// changes.
func TestFuzzSeedsCommitted(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzInstrument")
	for name := range seedModules() {
		if _, err := os.Stat(filepath.Join(dir, "seed-"+sanitize(name))); err != nil {
			t.Errorf("seed %s is not in %s (go test -run TestWriteFuzzSeeds -meter.write-seeds): %v", name, dir, err)
		}
	}
}

// corpusInput reads an input of FuzzInstrument's corpus.
func corpusInput(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzInstrument", name))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 2 || lines[0] != "go test fuzz v1" ||
		!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		t.Fatalf("%s is not a go test fuzz v1 file of one []byte", name)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

// The inputs the fuzzer found failing, one test each. All three are
// modules wazero refuses and Instrument makes valid (see
// TestBugInvalidModulesBecomeValid and TestBugCounterGlobalCanBeForged).

// TestBugFuzzTrailingBytesAfterBodies: a code section of 68 bytes holding
// an empty vector and 67 bytes of junk; Instrument rewrites it to the
// empty vector alone.
func TestBugFuzzTrailingBytesAfterBodies(t *testing.T) {
	wantInvalid(t, corpusInput(t, "crash-trailing-byte-after-bodies"), 0)
}

// TestBugFuzzExportOfCountdownGlobal: an export of global 0 from a module
// without globals; instrumented, it exports the countdown.
func TestBugFuzzExportOfCountdownGlobal(t *testing.T) {
	wantInvalid(t, corpusInput(t, "crash-export-of-countdown-global"), 0)
}

// TestBugFuzzGlobalGetOfCountdownGlobal: global.get 0 in a function of a
// module without globals; instrumented, it reads the countdown.
func TestBugFuzzGlobalGetOfCountdownGlobal(t *testing.T) {
	wantInvalid(t, corpusInput(t, "crash-global-get-of-countdown-global"), 0)
}

// TestWazeroSafe: the fuzz target's guard lets the seed modules through
// and stops modules that would make wazero allocate gigabytes.
func TestWazeroSafe(t *testing.T) {
	for name, m := range seedModules() {
		if !wazeroSafe(m) {
			t.Errorf("seed %s is not wazeroSafe", name)
		}
	}
	void := typeSec(functype(nil, nil))
	for name, m := range map[string][]byte{
		"4G locals":          module(void, funcSec(0), codeSec(cat(u32(8), u32(1), u32(0xffffffff), ops(tI32, opEnd)))),
		"body of 4 GB":       module(void, funcSec(0), section(secCode, u32(1), u32(0xfffffff0), ops(0, opEnd))),
		"4 GB data segment":  module(memSec(1), dataSec(cat(u32(0), expr(i32c(0)), u32(0xffffffff)))),
		"4G elements":        module(void, tableSec(1), elemSec(cat(u32(0), expr(i32c(0)), u32(0xffffffff)))),
		"custom name of 4GB": module(section(secCustom, u32(0xffffffff))),
		"4G function names":  module(customSec("name", nameSubsection(1, u32(0xffffffff)))),
		"name section read past its end": module(
			customSec("name", ops(1, 0)), // a subsection of size 0, whose count wazero reads from what follows
			customSec("x", u32(0xffffffff)),
		),
	} {
		if wazeroSafe(m) {
			t.Errorf("%s is wazeroSafe", name)
		}
	}
}
