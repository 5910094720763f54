// Package meter rewrites a WebAssembly module so that a host can stop it
// cheaply and the Go runtime can always reach a safe point: every loop
// header gets a countdown, and when it reaches zero the guest calls the
// host function TickModule.TickName, which checks the guest's CPU budget
// and can end the call.
//
// Why not the engine's own interruption? wazero's WithCloseOnContextDone
// leaves guest code for Go at every loop header and function entry, which
// slows tight guest code several times over. And a guest spinning in pure
// WebAssembly with no such exit cannot be preempted at all: it blocks the
// Go garbage collector's stop-the-world, and with it the whole process. The
// countdown costs a load, a subtraction, a store and a branch per loop
// iteration, and a call into Go every Interval iterations. Any computation
// that runs unboundedly passes loop headers (recursion without loops
// overflows the stack instead), so loops are enough.
package meter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandflow/sandflow/internal/wasmbin"
)

const (
	// TickModule and TickName name the host function the rewritten module
	// imports: () -> ().
	TickModule = "sandflow"
	TickName   = "meter_tick"
	// Interval is how many loop iterations pass between ticks.
	Interval = 1 << 14
	// GlobalPrefix starts the names under which the rewritten module
	// exports its mutable globals, in order: GlobalPrefix+"0", "1", ….
	// With the linear memory they are the whole state of an instance
	// between export calls, so a host can snapshot and restore it.
	GlobalPrefix = "sandflow.global."
)

// ErrUnsupported is returned for a module the rewriter cannot read, such
// as one using an opcode it does not know.
var ErrUnsupported = errors.New("module cannot be metered")

// ErrReservedExport (an ErrUnsupported) is returned for a module that
// exports a name starting with GlobalPrefix, such as Instrument's own
// output.
var ErrReservedExport = fmt.Errorf("%w: reserved export name", ErrUnsupported)

// reader is wasmbin's reader with the rewriter, for index checks.
type reader struct {
	wasmbin.Reader
	rw *rewriter // for index checks, when set
}

func newReader(b []byte, rw *rewriter) *reader {
	return &reader{Reader: wasmbin.Reader{B: b, Err: ErrUnsupported}, rw: rw}
}

// limits skips limits.
func limits(r *reader) error {
	_, _, err := r.Limits()
	return err
}

// index reads an index and checks it is below n: the rewrite gives new
// indices meaning, so an index the original module could not use must not
// reach the engine (it would name the countdown or the tick).
func (r *reader) index(n uint32, what string) (uint32, error) {
	v, err := r.U32()
	if err == nil && v >= n {
		return 0, r.Fail("%s index %d of %d: the module is invalid", what, v, n)
	}
	return v, err
}

func (r *reader) skip(n int) error {
	if n < 0 || n > len(r.B)-r.Off {
		return r.Fail("%d bytes run past the end", n)
	}
	r.Off += n
	return nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	start := r.Off
	if err := r.Skip(n); err != nil {
		return nil, err
	}
	return r.B[start:r.Off], nil
}

// rewriter holds what the rewrite needs across sections.
type rewriter struct {
	importedFuncs uint32 // before the tick import is added
	funcs         uint32 // imported and defined, before the tick
	globals       uint32 // imported and defined, before the countdown
	types         uint32 // before the tick's type
	tick          uint32 // the tick function's index
	counter       uint32 // the countdown global's index
	tickType      uint32
	// mutable are the defined mutable globals (indices), exported under
	// GlobalPrefix.
	mutable []uint32
	// outside names an instruction of the code that changes state beyond
	// the memory and the globals, if any.
	outside string
}

// remap moves a function index past the new import.
func (rw *rewriter) remap(f uint32) uint32 {
	if f >= rw.importedFuncs {
		return f + 1
	}
	return f
}

type section struct {
	id   byte
	body []byte
}

// outsideState are the 0xfc instructions that change a table or drop a
// segment.
var outsideState = map[uint64]string{9: "data.drop", 12: "table.init", 13: "elem.drop", 14: "table.copy", 15: "table.grow", 17: "table.fill"}

// Module is an instrumented module and what the rewrite found.
type Module struct {
	Wasm []byte
	// Globals is how many mutable globals it exports under GlobalPrefix.
	Globals int
	// OutsideState names an instruction in the code that changes state
	// besides the linear memory and the globals (a table, or a dropped
	// segment), when there is one: memory and globals are then not the
	// whole state of an instance between calls.
	OutsideState string
}

// Instrument returns a copy of wasm with the countdown in every loop.
func Instrument(wasm []byte) ([]byte, error) {
	m, err := InstrumentModule(wasm)
	return m.Wasm, err
}

// InstrumentModule is Instrument, with what the rewrite found.
func InstrumentModule(wasm []byte) (Module, error) {
	out, rw, err := instrument(wasm)
	if err != nil {
		return Module{}, err
	}
	return Module{Wasm: out, Globals: len(rw.mutable), OutsideState: rw.outside}, nil
}

func instrument(wasm []byte) ([]byte, *rewriter, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || wasm[4] != 1 || wasm[5] != 0 || wasm[6] != 0 || wasm[7] != 0 {
		return nil, nil, fmt.Errorf("%w: not a core WebAssembly module", ErrUnsupported)
	}
	var secs []section
	r := newReader(wasm, nil)
	r.Off = 8
	rw := &rewriter{}
	var types, importedGlobals, importedMems, definedGlobals, definedFuncs uint32
	for r.Off < len(wasm) {
		id, err := r.Byte()
		if err != nil {
			return nil, nil, err
		}
		n, err := r.U32()
		if err != nil {
			return nil, nil, err
		}
		body, err := r.Bytes(int(n))
		if err != nil {
			return nil, nil, err
		}
		sr := newReader(body, nil)
		switch id {
		case 1:
			if types, err = sr.U32(); err != nil {
				return nil, nil, err
			}
		case 2: // after the type section, so type indices can be checked
			if rw.importedFuncs, importedGlobals, importedMems, err = countImports(body, types); err != nil {
				return nil, nil, err
			}
		case 3:
			if definedFuncs, err = sr.U32(); err != nil {
				return nil, nil, err
			}
		case 6:
			if definedGlobals, err = sr.U32(); err != nil {
				return nil, nil, err
			}
		}
		secs = append(secs, section{id, body})
	}
	// Data segments are merged only into a memory of the module's own,
	// which starts zeroed, and only when no instruction names them.
	mergeable := importedMems == 0
	for _, s := range secs {
		mergeable = mergeable && s.id != 12
	}
	rw.tick = rw.importedFuncs
	rw.funcs = rw.importedFuncs + definedFuncs
	rw.globals = importedGlobals + definedGlobals
	rw.counter = rw.globals
	rw.types = types
	rw.tickType = types

	out := append([]byte(nil), wasm[:8]...)
	put := func(id byte, body []byte) {
		out = append(out, id)
		out = wasmbin.AppendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	// The position of each known section in the required order.
	order := map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}
	tickTypeEntry := []byte{0x60, 0x00, 0x00}
	tickImport := wasmbin.AppendName(wasmbin.AppendName(nil, TickModule), TickName)
	tickImport = wasmbin.AppendULEB(append(tickImport, 0x00), uint64(rw.tickType))
	// (global (mut i32) (i32.const Interval))
	counterGlobal := append(wasmbin.AppendSLEB([]byte{0x7f, 0x01, 0x41}, Interval), 0x0b)
	done := map[byte]bool{}
	addMissing := func(before byte) {
		for _, id := range []byte{1, 2, 6, 7} {
			if !done[id] && (before == 0 || order[id] < order[before]) {
				switch id {
				case 1:
					put(1, append(wasmbin.AppendULEB(nil, 1), tickTypeEntry...))
				case 2:
					put(2, append(wasmbin.AppendULEB(nil, 1), tickImport...))
				case 6:
					put(6, append(wasmbin.AppendULEB(nil, 1), counterGlobal...))
				case 7:
					if len(rw.mutable) > 0 {
						put(7, rw.globalExports(wasmbin.AppendULEB(nil, 0), 0))
					}
				}
				done[id] = true
			}
		}
	}
	for _, s := range secs {
		if s.id != 0 {
			addMissing(s.id)
		}
		var body []byte
		var err error
		switch s.id {
		case 1:
			body, err = appendToVector(s.body, tickTypeEntry)
		case 2:
			body, err = appendToVector(s.body, tickImport)
		case 3:
			body, err = rw.checkFunctions(s.body)
		case 4:
			body, err = rw.tables(s.body)
		case 6:
			body, err = rw.globalSection(s.body, counterGlobal)
		case 7:
			body, err = rw.exports(s.body)
		case 8:
			sr := newReader(s.body, nil)
			var f uint32
			if f, err = sr.index(rw.funcs, "start function"); err == nil {
				if err = sr.End(); err == nil {
					body = wasmbin.AppendULEB(nil, uint64(rw.remap(f)))
				}
			}
		case 9:
			body, err = rw.elements(s.body)
		case 10:
			body, err = rw.code(s.body)
		case 11:
			body = mergeData(s.body, mergeable)
		case 0:
			body, err = rw.custom(s.body)
			if body == nil && err == nil {
				continue // dropped
			}
		default:
			body = s.body
		}
		if err != nil {
			return nil, nil, err
		}
		done[s.id] = true
		put(s.id, body)
	}
	addMissing(0)
	return out, rw, nil
}

// checkFunctions checks the function section's type indices.
func (rw *rewriter) checkFunctions(body []byte) ([]byte, error) {
	r := newReader(body, rw)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	for range n {
		if _, err := r.index(rw.types, "type"); err != nil {
			return nil, err
		}
	}
	return body, r.End()
}

// tables copies the table section, remapping the function indices in
// table initialisers (the 0x40 0x00 form).
func (rw *rewriter) tables(body []byte) ([]byte, error) {
	r := newReader(body, rw)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n))
	for range n {
		start := r.Off
		init := false
		if r.Off+1 < len(r.B) && r.B[r.Off] == 0x40 && r.B[r.Off+1] == 0x00 {
			init = true
			r.Off += 2
		}
		if err := r.ValType(); err != nil {
			return nil, err
		}
		if err := limits(r); err != nil {
			return nil, err
		}
		out = append(out, body[start:r.Off]...)
		if init {
			if out, err = rw.expr(r, out, false); err != nil {
				return nil, err
			}
		}
	}
	return out, r.End()
}

// appendToVector adds one encoded entry to a section that is a vector.
func appendToVector(body, entry []byte) ([]byte, error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n)+1)
	out = append(out, body[r.Off:]...)
	return append(out, entry...), nil
}

// countImports counts the imported functions and globals, checking each
// import's type index against the module's types and the section's end.
func countImports(body []byte, types uint32) (funcs, globals, memories uint32, err error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return 0, 0, 0, err
	}
	for range n {
		for range 2 { // module, name
			l, err := r.U32()
			if err != nil {
				return 0, 0, 0, err
			}
			if err := r.Skip(int(l)); err != nil {
				return 0, 0, 0, err
			}
		}
		kind, err := r.Byte()
		if err != nil {
			return 0, 0, 0, err
		}
		switch kind {
		case 0: // func: type index
			funcs++
			_, err = r.index(types, "type")
		case 1: // table: reftype, limits
			if err = r.ValType(); err == nil {
				err = limits(r)
			}
		case 2: // memory
			memories++
			err = limits(r)
		case 3: // global: valtype, mut
			globals++
			if err = r.ValType(); err == nil {
				_, err = r.Byte()
			}
		case 4: // tag: attribute, type index
			if _, err = r.Byte(); err == nil {
				_, err = r.index(types, "type")
			}
		default:
			return 0, 0, 0, r.Fail("import kind %d", kind)
		}
		if err != nil {
			return 0, 0, 0, err
		}
	}
	return funcs, globals, memories, r.End()
}

// blocktype skips a block type: empty, a value type, or a type index.
func (r *reader) blocktype() error {
	if r.Off >= len(r.B) {
		return r.Fail("unexpected end")
	}
	b := r.B[r.Off]
	switch {
	case b == 0x40:
		r.Off++
		return nil
	case b == 0x63 || b == 0x64:
		return r.ValType()
	case b >= 0x6a && b <= 0x7f: // one-byte value types
		r.Off++
		return nil
	}
	// s33 type index (non-negative: a negative one is a value type)
	start := r.Off
	v, err := r.LEB()
	if err != nil {
		return err
	}
	if r.Off-start > 5 || (r.rw != nil && v >= uint64(r.rw.types)) {
		return r.Fail("block type index %d: the module is invalid", v)
	}
	return nil
}

// typeIndex reads a type index, checked when the rewriter is known.
func (r *reader) typeIndex() error {
	if r.rw != nil {
		_, err := r.index(r.rw.types, "type")
		return err
	}
	_, err := r.U32()
	return err
}

func (r *reader) memarg() error {
	align, err := r.LEB()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: a memory index follows
		if _, err := r.LEB(); err != nil {
			return err
		}
	}
	_, err = r.LEB()
	return err
}

// expr copies instructions up to and including the end that closes the
// expression or function body, remapping function indices, and inserting
// the countdown after every loop when meter is set.
func (rw *rewriter) expr(r *reader, out []byte, meter bool) ([]byte, error) {
	out, _, err := rw.exprTail(r, out, meter)
	return out, err
}

// exprTail is expr that also reports whether the code makes a tail call.
func (rw *rewriter) exprTail(r *reader, out []byte, meter bool) ([]byte, bool, error) {
	r.rw = rw
	depth := 0
	last := r.Off
	tail := false
	for {
		start := r.Off
		op, err := r.Byte()
		if err != nil {
			return nil, false, err
		}
		switch op {
		case 0x10, 0x12, 0xd2: // call, return_call, ref.func: remap
			f, err := r.index(rw.funcs, "function")
			if err != nil {
				return nil, false, err
			}
			tail = tail || op == 0x12
			out = append(out, r.B[last:start]...)
			out = wasmbin.AppendULEB(append(out, op), uint64(rw.remap(f)))
			last = r.Off
			continue
		case 0x13, 0x15: // return_call_indirect, return_call_ref
			tail = true
		case 0x26:
			rw.outside = "table.set"
		case 0xfc:
			peek := wasmbin.Reader{B: r.B, Off: r.Off}
			if sub, err := peek.LEB(); err == nil && outsideState[sub] != "" {
				rw.outside = outsideState[sub]
			}
		}
		if err := r.immediates(op); err != nil {
			return nil, false, err
		}
		switch op {
		case 0x02, 0x04, 0x06, 0x1f: // block if try try_table
			depth++
		case 0x03: // loop
			depth++
			if meter {
				out = append(out, r.B[last:r.Off]...)
				out = rw.appendCountdown(out)
				last = r.Off
			}
		case 0x0b: // end
			if depth == 0 {
				return append(out, r.B[last:r.Off]...), tail, nil
			}
			depth--
		case 0x18: // delegate ends a try
			depth--
		}
	}
}

// appendCountdown appends: counter -= 1; if counter == 0 { counter =
// Interval; tick() }.
func (rw *rewriter) appendCountdown(out []byte) []byte {
	g := uint64(rw.counter)
	out = wasmbin.AppendULEB(append(out, 0x23), g)               // global.get c
	out = append(out, 0x41, 0x01, 0x6b)                          // i32.const 1; i32.sub
	out = wasmbin.AppendULEB(append(out, 0x24), g)               // global.set c
	out = wasmbin.AppendULEB(append(out, 0x23), g)               // global.get c
	out = append(out, 0x45, 0x04, 0x40, 0x41)                    // i32.eqz; if; i32.const
	out = wasmbin.AppendSLEB(out, Interval)                      //   Interval
	out = wasmbin.AppendULEB(append(out, 0x24), g)               //   global.set c
	out = wasmbin.AppendULEB(append(out, 0x10), uint64(rw.tick)) // call tick
	return append(out, 0x0b)                                     // end
}

func (rw *rewriter) code(body []byte) ([]byte, error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(make([]byte, 0, len(body)+len(body)/8), uint64(n))
	for range n {
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		fb, err := r.Bytes(int(size))
		if err != nil {
			return nil, err
		}
		fr := newReader(fb, nil)
		groups, err := fr.U32()
		if err != nil {
			return nil, err
		}
		for range groups {
			if _, err := fr.U32(); err != nil {
				return nil, err
			}
			if err := fr.ValType(); err != nil {
				return nil, err
			}
		}
		locals := fr.Off
		fn := append(make([]byte, 0, len(fb)+64), fb[:locals]...)
		var tail bool
		if fn, tail, err = rw.exprTail(fr, fn, true); err != nil {
			return nil, err
		}
		if fr.Off != len(fb) {
			return nil, fr.Fail("function body has %d bytes after its end", len(fb)-fr.Off)
		}
		if tail {
			// A cycle of tail calls loops without a loop header and without
			// growing the stack: a function that makes a tail call counts
			// down on entry too.
			entry := rw.appendCountdown(append([]byte(nil), fn[:locals]...))
			fn = append(entry, fn[locals:]...)
		}
		out = wasmbin.AppendULEB(out, uint64(len(fn)))
		out = append(out, fn...)
	}
	return out, r.End()
}

func (rw *rewriter) globalSection(body, extra []byte) ([]byte, error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n)+1)
	imported := rw.globals - n
	for i := range n {
		start := r.Off
		if err := r.ValType(); err != nil {
			return nil, err
		}
		mut, err := r.Byte()
		if err != nil {
			return nil, err
		}
		if mut == 1 {
			rw.mutable = append(rw.mutable, imported+i)
		}
		out = append(out, body[start:r.Off]...)
		if out, err = rw.expr(r, out, false); err != nil {
			return nil, err
		}
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return append(out, extra...), nil
}

func (rw *rewriter) exports(body []byte) ([]byte, error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n))
	for range n {
		l, err := r.U32()
		if err != nil {
			return nil, err
		}
		name, err := r.Bytes(int(l))
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(string(name), GlobalPrefix) {
			return nil, fmt.Errorf("%w: %q (names starting %q are the host's)", ErrReservedExport, name, GlobalPrefix)
		}
		kind, err := r.Byte()
		if err != nil {
			return nil, err
		}
		var idx uint32
		switch kind {
		case 0:
			if idx, err = r.index(rw.funcs, "exported function"); err == nil {
				idx = rw.remap(idx)
			}
		case 3:
			idx, err = r.index(rw.globals, "exported global")
		default:
			idx, err = r.U32()
		}
		if err != nil {
			return nil, err
		}
		out = wasmbin.AppendULEB(out, uint64(l))
		out = append(out, name...)
		out = wasmbin.AppendULEB(append(out, kind), uint64(idx))
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return rw.globalExports(out, n), nil
}

// globalExports appends the exports of the mutable globals to an export
// vector of n entries (out), fixing its count.
func (rw *rewriter) globalExports(out []byte, n uint32) []byte {
	if len(rw.mutable) == 0 {
		return out
	}
	r := newReader(out, nil)
	r.U32() // out starts with n, written by the caller
	fixed := wasmbin.AppendULEB(nil, uint64(n)+uint64(len(rw.mutable)))
	fixed = append(fixed, out[r.Off:]...)
	for k, g := range rw.mutable {
		fixed = wasmbin.AppendName(fixed, GlobalPrefix+strconv.Itoa(k))
		fixed = wasmbin.AppendULEB(append(fixed, 3), uint64(g))
	}
	return fixed
}

func (rw *rewriter) funcVector(r *reader, out []byte) ([]byte, error) {
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out = wasmbin.AppendULEB(out, uint64(n))
	for range n {
		f, err := r.index(rw.funcs, "function")
		if err != nil {
			return nil, err
		}
		out = wasmbin.AppendULEB(out, uint64(rw.remap(f)))
	}
	return out, nil
}

func (rw *rewriter) exprVector(r *reader, out []byte) ([]byte, error) {
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out = wasmbin.AppendULEB(out, uint64(n))
	for range n {
		if out, err = rw.expr(r, out, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (rw *rewriter) elements(body []byte) ([]byte, error) {
	r := newReader(body, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n))
	for range n {
		flags, err := r.U32()
		if err != nil {
			return nil, err
		}
		out = wasmbin.AppendULEB(out, uint64(flags))
		if flags > 7 {
			return nil, r.Fail("element segment flags %d", flags)
		}
		if flags&2 != 0 && flags&1 == 0 { // explicit table index
			t, err := r.U32()
			if err != nil {
				return nil, err
			}
			out = wasmbin.AppendULEB(out, uint64(t))
		}
		if flags&1 == 0 { // active: offset expression
			if out, err = rw.expr(r, out, false); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			start := r.Off
			if flags&4 != 0 {
				err = r.ValType()
			} else {
				_, err = r.Byte()
			}
			if err != nil {
				return nil, err
			}
			out = append(out, body[start:r.Off]...)
		}
		if flags&4 != 0 {
			out, err = rw.exprVector(r, out)
		} else {
			out, err = rw.funcVector(r, out)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, r.End()
}

// custom keeps custom sections, remapping the function indices of the name
// section; a name section it cannot read is dropped (it only names things).
func (rw *rewriter) custom(body []byte) ([]byte, error) {
	r := newReader(body, nil)
	l, err := r.U32()
	if err != nil {
		return nil, err
	}
	name, err := r.Bytes(int(l))
	if err != nil {
		return nil, err
	}
	if string(name) != "name" {
		return body, nil
	}
	out := append([]byte(nil), body[:r.Off]...)
	for r.Off < len(body) {
		id, err := r.Byte()
		if err != nil {
			return nil, nil
		}
		size, err := r.U32()
		if err != nil {
			return nil, nil
		}
		sub, err := r.Bytes(int(size))
		if err != nil {
			return nil, nil
		}
		if id == 1 || id == 2 || id == 3 { // function, local and label names: indexed by function
			sub, err = rw.nameMap(sub, id != 1)
			if err != nil {
				return nil, nil
			}
		}
		out = wasmbin.AppendULEB(append(out, id), uint64(len(sub)))
		out = append(out, sub...)
	}
	return out, nil
}

func (rw *rewriter) nameMap(sub []byte, nested bool) ([]byte, error) {
	r := newReader(sub, nil)
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(nil, uint64(n))
	for range n {
		f, err := r.U32()
		if err != nil {
			return nil, err
		}
		out = wasmbin.AppendULEB(out, uint64(rw.remap(f)))
		start := r.Off
		if nested { // a map of local index to name
			m, err := r.U32()
			if err != nil {
				return nil, err
			}
			for range m {
				if _, err := r.U32(); err != nil {
					return nil, err
				}
				l, err := r.U32()
				if err != nil {
					return nil, err
				}
				if err := r.Skip(int(l)); err != nil {
					return nil, err
				}
			}
		} else {
			l, err := r.U32()
			if err != nil {
				return nil, err
			}
			if err := r.Skip(int(l)); err != nil {
				return nil, err
			}
		}
		out = append(out, sub[start:r.Off]...)
	}
	return out, nil
}

// immediates skips the immediates of an instruction whose opcode was read.
func (r *reader) immediates(op byte) error {
	var err error
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06: // block loop if try
		err = r.blocktype()
	case op == 0x0c || op == 0x0d || op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0xd5 || op == 0xd6:
		// br br_if catch throw rethrow delegate br_on_null br_on_non_null
		_, err = r.U32()
	case op == 0x0e: // br_table
		var n uint64
		if n, err = r.LEB(); err != nil {
			return err
		}
		if n > uint64(len(r.B)) {
			return r.Fail("br_table of %d labels", n)
		}
		for range n + 1 {
			if _, err = r.LEB(); err != nil {
				return err
			}
		}
	case op == 0x10 || op == 0x12 || op == 0xd2: // call return_call ref.func
		_, err = r.U32()
	case op == 0x14 || op == 0x15: // call_ref return_call_ref: a type index
		err = r.typeIndex()
	case op == 0x11 || op == 0x13: // call_indirect return_call_indirect: type, table
		if err = r.typeIndex(); err == nil {
			_, err = r.U32()
		}
	case op == 0x1c: // select t*
		var n uint64
		if n, err = r.LEB(); err != nil {
			return err
		}
		if n > uint64(len(r.B)) {
			return r.Fail("select of %d types", n)
		}
		for range n {
			if err = r.ValType(); err != nil {
				return err
			}
		}
	case op == 0x1f: // try_table bt vec(catch)
		if err = r.blocktype(); err != nil {
			return err
		}
		var n uint64
		if n, err = r.LEB(); err != nil {
			return err
		}
		if n > uint64(len(r.B)) {
			return r.Fail("try_table of %d catches", n)
		}
		for range n {
			kind, err := r.Byte()
			if err != nil {
				return err
			}
			if kind == 0 || kind == 1 { // catch, catch_ref: tag then label
				if _, err := r.LEB(); err != nil {
					return err
				}
			}
			if _, err := r.LEB(); err != nil {
				return err
			}
		}
	case op == 0x23 || op == 0x24: // global.get global.set
		if r.rw != nil {
			_, err = r.index(r.rw.globals, "global")
		} else {
			_, err = r.U32()
		}
	case op >= 0x20 && op <= 0x26: // locals, table.get/set
		_, err = r.U32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = r.memarg()
	case op == 0x3f || op == 0x40: // memory.size memory.grow
		_, err = r.LEB()
	case op == 0x41 || op == 0x42: // i32.const i64.const
		_, err = r.LEB()
	case op == 0x43:
		err = r.Skip(4)
	case op == 0x44:
		err = r.Skip(8)
	case op == 0xd0: // ref.null heaptype
		_, err = r.LEB()
	case op == 0xfc:
		err = r.miscImmediates()
	case op == 0xfd:
		err = r.simdImmediates()
	case op == 0xfe:
		err = r.atomicImmediates()
	case op <= 0x01, op == 0x05, op == 0x0a, op == 0x0b, op == 0x0f, op == 0x19, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1, op == 0xd3, op == 0xd4:
		// no immediates
	default:
		return r.Fail("opcode %#x", op)
	}
	return err
}

func (r *reader) miscImmediates() error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // saturating truncations
		return nil
	case sub == 8: // memory.init data mem
		if _, err := r.LEB(); err != nil {
			return err
		}
		_, err = r.LEB()
	case sub == 9 || sub == 13 || sub == 15 || sub == 16 || sub == 17: // data.drop elem.drop table.grow table.size table.fill
		_, err = r.LEB()
	case sub == 10 || sub == 12 || sub == 14: // memory.copy table.init table.copy
		if _, err := r.LEB(); err != nil {
			return err
		}
		_, err = r.LEB()
	case sub == 11: // memory.fill
		_, err = r.LEB()
	default:
		return r.Fail("0xfc opcode %d", sub)
	}
	return err
}

func (r *reader) simdImmediates() error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // loads, store, load*_zero
		return r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		return r.Skip(16)
	case sub >= 21 && sub <= 34: // extract/replace lane
		return r.Skip(1)
	case sub >= 84 && sub <= 91: // load/store lane
		if err := r.memarg(); err != nil {
			return err
		}
		return r.Skip(1)
	case sub <= 0x113:
		return nil
	}
	return r.Fail("0xfd opcode %d", sub)
}

func (r *reader) atomicImmediates() error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub == 3: // atomic.fence
		return r.Skip(1)
	case sub <= 0x4e:
		return r.memarg()
	}
	return r.Fail("0xfe opcode %d", sub)
}
