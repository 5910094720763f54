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
)

const (
	// TickModule and TickName name the host function the rewritten module
	// imports: () -> ().
	TickModule = "sandflow"
	TickName   = "meter_tick"
	// Interval is how many loop iterations pass between ticks.
	Interval = 1 << 14
)

// ErrUnsupported is returned for a module the rewriter cannot read, such
// as one using an opcode it does not know.
var ErrUnsupported = errors.New("module cannot be metered")

type reader struct {
	b   []byte
	off int
	rw  *rewriter // for index checks, when set
}

func (r *reader) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrUnsupported, r.off, fmt.Sprintf(format, args...))
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) leb() (uint64, error) {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.fail("LEB128 too long")
}

func (r *reader) u32() (uint32, error) {
	start := r.off
	v, err := r.leb()
	if err == nil && (v > 0xffffffff || r.off-start > 5) {
		return 0, r.fail("u32 out of range or over 5 bytes")
	}
	return uint32(v), err
}

// index reads an index and checks it is below n: the rewrite gives new
// indices meaning, so an index the original module could not use must not
// reach the engine (it would name the countdown or the tick).
func (r *reader) index(n uint32, what string) (uint32, error) {
	v, err := r.u32()
	if err == nil && v >= n {
		return 0, r.fail("%s index %d of %d: the module is invalid", what, v, n)
	}
	return v, err
}

func (r *reader) skip(n int) error {
	if n < 0 || n > len(r.b)-r.off {
		return r.fail("%d bytes run past the end", n)
	}
	r.off += n
	return nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	start := r.off
	if err := r.skip(n); err != nil {
		return nil, err
	}
	return r.b[start:r.off], nil
}

func appendLEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendLEB(b, uint64(len(s))), s...)
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

// Instrument returns a copy of wasm with the countdown in every loop.
func Instrument(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || wasm[4] != 1 || wasm[5] != 0 || wasm[6] != 0 || wasm[7] != 0 {
		return nil, fmt.Errorf("%w: not a core WebAssembly module", ErrUnsupported)
	}
	var secs []section
	r := &reader{b: wasm, off: 8}
	rw := &rewriter{}
	var types, importedGlobals, definedGlobals, definedFuncs uint32
	for r.off < len(wasm) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		sr := &reader{b: body}
		switch id {
		case 1:
			if types, err = sr.u32(); err != nil {
				return nil, err
			}
		case 2:
			if rw.importedFuncs, importedGlobals, err = countImports(body); err != nil {
				return nil, err
			}
		case 3:
			if definedFuncs, err = sr.u32(); err != nil {
				return nil, err
			}
		case 6:
			if definedGlobals, err = sr.u32(); err != nil {
				return nil, err
			}
		}
		secs = append(secs, section{id, body})
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
		out = appendLEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	// The position of each known section in the required order.
	order := map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}
	tickTypeEntry := []byte{0x60, 0x00, 0x00}
	tickImport := appendName(appendName(nil, TickModule), TickName)
	tickImport = appendLEB(append(tickImport, 0x00), uint64(rw.tickType))
	// (global (mut i32) (i32.const Interval))
	counterGlobal := append(appendSLEB([]byte{0x7f, 0x01, 0x41}, Interval), 0x0b)
	done := map[byte]bool{}
	addMissing := func(before byte) {
		for _, id := range []byte{1, 2, 6} {
			if !done[id] && (before == 0 || order[id] < order[before]) {
				switch id {
				case 1:
					put(1, append(appendLEB(nil, 1), tickTypeEntry...))
				case 2:
					put(2, append(appendLEB(nil, 1), tickImport...))
				case 6:
					put(6, append(appendLEB(nil, 1), counterGlobal...))
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
			if err = rw.checkImports(s.body); err == nil {
				body, err = appendToVector(s.body, tickImport)
			}
		case 3:
			body, err = rw.checkFunctions(s.body)
		case 4:
			body, err = rw.tables(s.body)
		case 6:
			body, err = rw.globalSection(s.body, counterGlobal)
		case 7:
			body, err = rw.exports(s.body)
		case 8:
			sr := &reader{b: s.body}
			var f uint32
			if f, err = sr.index(rw.funcs, "start function"); err == nil {
				if err = sr.end(); err == nil {
					body = appendLEB(nil, uint64(rw.remap(f)))
				}
			}
		case 9:
			body, err = rw.elements(s.body)
		case 10:
			body, err = rw.code(s.body)
		case 0:
			body, err = rw.custom(s.body)
			if body == nil && err == nil {
				continue // dropped
			}
		default:
			body = s.body
		}
		if err != nil {
			return nil, err
		}
		done[s.id] = true
		put(s.id, body)
	}
	addMissing(0)
	return out, nil
}

// end checks a section was read to its end: trailing bytes make a module
// invalid, and the rewrite must not drop them into validity.
func (r *reader) end() error {
	if r.off != len(r.b) {
		return r.fail("%d bytes after the last entry: the module is invalid", len(r.b)-r.off)
	}
	return nil
}

// checkImports checks the type indices of function imports.
func (rw *rewriter) checkImports(body []byte) error {
	r := &reader{b: body, rw: rw}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		for range 2 {
			l, err := r.u32()
			if err != nil {
				return err
			}
			if err := r.skip(int(l)); err != nil {
				return err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0:
			_, err = r.index(rw.types, "type")
		case 1:
			if err = r.valtype(); err == nil {
				err = r.limits()
			}
		case 2:
			err = r.limits()
		case 3:
			if err = r.valtype(); err == nil {
				_, err = r.byte()
			}
		case 4:
			if _, err = r.byte(); err == nil {
				_, err = r.index(rw.types, "type")
			}
		default:
			return r.fail("import kind %d", kind)
		}
		if err != nil {
			return err
		}
	}
	return r.end()
}

// checkFunctions checks the function section's type indices.
func (rw *rewriter) checkFunctions(body []byte) ([]byte, error) {
	r := &reader{b: body, rw: rw}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	for range n {
		if _, err := r.index(rw.types, "type"); err != nil {
			return nil, err
		}
	}
	return body, r.end()
}

// tables copies the table section, remapping the function indices in
// table initialisers (the 0x40 0x00 form).
func (rw *rewriter) tables(body []byte) ([]byte, error) {
	r := &reader{b: body, rw: rw}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n))
	for range n {
		start := r.off
		init := false
		if r.off+1 < len(r.b) && r.b[r.off] == 0x40 && r.b[r.off+1] == 0x00 {
			init = true
			r.off += 2
		}
		if err := r.valtype(); err != nil {
			return nil, err
		}
		if err := r.limits(); err != nil {
			return nil, err
		}
		out = append(out, body[start:r.off]...)
		if init {
			if out, err = rw.expr(r, out, false); err != nil {
				return nil, err
			}
		}
	}
	return out, r.end()
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// appendToVector adds one encoded entry to a section that is a vector.
func appendToVector(body, entry []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n)+1)
	out = append(out, body[r.off:]...)
	return append(out, entry...), nil
}

func countImports(body []byte) (funcs, globals uint32, err error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return 0, 0, err
	}
	for range n {
		for range 2 { // module, name
			l, err := r.u32()
			if err != nil {
				return 0, 0, err
			}
			if err := r.skip(int(l)); err != nil {
				return 0, 0, err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return 0, 0, err
		}
		switch kind {
		case 0: // func: type index
			funcs++
			_, err = r.u32()
		case 1: // table: reftype, limits
			if err = r.valtype(); err == nil {
				err = r.limits()
			}
		case 2: // memory
			err = r.limits()
		case 3: // global: valtype, mut
			globals++
			if err = r.valtype(); err == nil {
				_, err = r.byte()
			}
		case 4: // tag
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, 0, r.fail("import kind %d", kind)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return funcs, globals, nil
}

func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if _, err := r.leb(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.leb()
	}
	return err
}

// valtype skips a value type, including the typed-reference forms.
func (r *reader) valtype() error {
	b, err := r.byte()
	if err != nil {
		return err
	}
	if b == 0x63 || b == 0x64 { // (ref null ht), (ref ht)
		_, err = r.leb()
	}
	return err
}

// blocktype skips a block type: empty, a value type, or a type index.
func (r *reader) blocktype() error {
	if r.off >= len(r.b) {
		return r.fail("unexpected end")
	}
	b := r.b[r.off]
	switch {
	case b == 0x40:
		r.off++
		return nil
	case b == 0x63 || b == 0x64:
		return r.valtype()
	case b >= 0x6a && b <= 0x7f: // one-byte value types
		r.off++
		return nil
	}
	// s33 type index (non-negative: a negative one is a value type)
	start := r.off
	v, err := r.leb()
	if err != nil {
		return err
	}
	if r.off-start > 5 || (r.rw != nil && v >= uint64(r.rw.types)) {
		return r.fail("block type index %d: the module is invalid", v)
	}
	return nil
}

// typeIndex reads a type index, checked when the rewriter is known.
func (r *reader) typeIndex() error {
	if r.rw != nil {
		_, err := r.index(r.rw.types, "type")
		return err
	}
	_, err := r.u32()
	return err
}

func (r *reader) memarg() error {
	align, err := r.leb()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: a memory index follows
		if _, err := r.leb(); err != nil {
			return err
		}
	}
	_, err = r.leb()
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
	last := r.off
	tail := false
	for {
		start := r.off
		op, err := r.byte()
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
			out = append(out, r.b[last:start]...)
			out = appendLEB(append(out, op), uint64(rw.remap(f)))
			last = r.off
			continue
		case 0x13, 0x15: // return_call_indirect, return_call_ref
			tail = true
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
				out = append(out, r.b[last:r.off]...)
				out = rw.appendCountdown(out)
				last = r.off
			}
		case 0x0b: // end
			if depth == 0 {
				return append(out, r.b[last:r.off]...), tail, nil
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
	out = appendLEB(append(out, 0x23), g)               // global.get c
	out = append(out, 0x41, 0x01, 0x6b)                 // i32.const 1; i32.sub
	out = appendLEB(append(out, 0x24), g)               // global.set c
	out = appendLEB(append(out, 0x23), g)               // global.get c
	out = append(out, 0x45, 0x04, 0x40, 0x41)           // i32.eqz; if; i32.const
	out = appendSLEB(out, Interval)                     //   Interval
	out = appendLEB(append(out, 0x24), g)               //   global.set c
	out = appendLEB(append(out, 0x10), uint64(rw.tick)) // call tick
	return append(out, 0x0b)                            // end
}

func (rw *rewriter) code(body []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(make([]byte, 0, len(body)+len(body)/8), uint64(n))
	for range n {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		fb, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		fr := &reader{b: fb}
		groups, err := fr.u32()
		if err != nil {
			return nil, err
		}
		for range groups {
			if _, err := fr.u32(); err != nil {
				return nil, err
			}
			if err := fr.valtype(); err != nil {
				return nil, err
			}
		}
		locals := fr.off
		fn := append(make([]byte, 0, len(fb)+64), fb[:locals]...)
		var tail bool
		if fn, tail, err = rw.exprTail(fr, fn, true); err != nil {
			return nil, err
		}
		if fr.off != len(fb) {
			return nil, fr.fail("function body has %d bytes after its end", len(fb)-fr.off)
		}
		if tail {
			// A cycle of tail calls loops without a loop header and without
			// growing the stack: a function that makes a tail call counts
			// down on entry too.
			entry := rw.appendCountdown(append([]byte(nil), fn[:locals]...))
			fn = append(entry, fn[locals:]...)
		}
		out = appendLEB(out, uint64(len(fn)))
		out = append(out, fn...)
	}
	return out, r.end()
}

func (rw *rewriter) globalSection(body, extra []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n)+1)
	for range n {
		start := r.off
		if err := r.valtype(); err != nil {
			return nil, err
		}
		if _, err := r.byte(); err != nil { // mutability
			return nil, err
		}
		out = append(out, body[start:r.off]...)
		if out, err = rw.expr(r, out, false); err != nil {
			return nil, err
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return append(out, extra...), nil
}

func (rw *rewriter) exports(body []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n))
	for range n {
		l, err := r.u32()
		if err != nil {
			return nil, err
		}
		name, err := r.bytes(int(l))
		if err != nil {
			return nil, err
		}
		kind, err := r.byte()
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
			idx, err = r.u32()
		}
		if err != nil {
			return nil, err
		}
		out = appendLEB(out, uint64(l))
		out = append(out, name...)
		out = appendLEB(append(out, kind), uint64(idx))
	}
	return out, r.end()
}

func (rw *rewriter) funcVector(r *reader, out []byte) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out = appendLEB(out, uint64(n))
	for range n {
		f, err := r.index(rw.funcs, "function")
		if err != nil {
			return nil, err
		}
		out = appendLEB(out, uint64(rw.remap(f)))
	}
	return out, nil
}

func (rw *rewriter) exprVector(r *reader, out []byte) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out = appendLEB(out, uint64(n))
	for range n {
		if out, err = rw.expr(r, out, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (rw *rewriter) elements(body []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n))
	for range n {
		flags, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = appendLEB(out, uint64(flags))
		if flags > 7 {
			return nil, r.fail("element segment flags %d", flags)
		}
		if flags&2 != 0 && flags&1 == 0 { // explicit table index
			t, err := r.u32()
			if err != nil {
				return nil, err
			}
			out = appendLEB(out, uint64(t))
		}
		if flags&1 == 0 { // active: offset expression
			if out, err = rw.expr(r, out, false); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			start := r.off
			if flags&4 != 0 {
				err = r.valtype()
			} else {
				_, err = r.byte()
			}
			if err != nil {
				return nil, err
			}
			out = append(out, body[start:r.off]...)
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
	return out, r.end()
}

// custom keeps custom sections, remapping the function indices of the name
// section; a name section it cannot read is dropped (it only names things).
func (rw *rewriter) custom(body []byte) ([]byte, error) {
	r := &reader{b: body}
	l, err := r.u32()
	if err != nil {
		return nil, err
	}
	name, err := r.bytes(int(l))
	if err != nil {
		return nil, err
	}
	if string(name) != "name" {
		return body, nil
	}
	out := append([]byte(nil), body[:r.off]...)
	for r.off < len(body) {
		id, err := r.byte()
		if err != nil {
			return nil, nil
		}
		size, err := r.u32()
		if err != nil {
			return nil, nil
		}
		sub, err := r.bytes(int(size))
		if err != nil {
			return nil, nil
		}
		if id == 1 || id == 2 || id == 3 { // function, local and label names: indexed by function
			sub, err = rw.nameMap(sub, id != 1)
			if err != nil {
				return nil, nil
			}
		}
		out = appendLEB(append(out, id), uint64(len(sub)))
		out = append(out, sub...)
	}
	return out, nil
}

func (rw *rewriter) nameMap(sub []byte, nested bool) ([]byte, error) {
	r := &reader{b: sub}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendLEB(nil, uint64(n))
	for range n {
		f, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = appendLEB(out, uint64(rw.remap(f)))
		start := r.off
		if nested { // a map of local index to name
			m, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range m {
				if _, err := r.u32(); err != nil {
					return nil, err
				}
				l, err := r.u32()
				if err != nil {
					return nil, err
				}
				if err := r.skip(int(l)); err != nil {
					return nil, err
				}
			}
		} else {
			l, err := r.u32()
			if err != nil {
				return nil, err
			}
			if err := r.skip(int(l)); err != nil {
				return nil, err
			}
		}
		out = append(out, sub[start:r.off]...)
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
		_, err = r.u32()
	case op == 0x0e: // br_table
		var n uint64
		if n, err = r.leb(); err != nil {
			return err
		}
		if n > uint64(len(r.b)) {
			return r.fail("br_table of %d labels", n)
		}
		for range n + 1 {
			if _, err = r.leb(); err != nil {
				return err
			}
		}
	case op == 0x10 || op == 0x12 || op == 0xd2: // call return_call ref.func
		_, err = r.u32()
	case op == 0x14 || op == 0x15: // call_ref return_call_ref: a type index
		err = r.typeIndex()
	case op == 0x11 || op == 0x13: // call_indirect return_call_indirect: type, table
		if err = r.typeIndex(); err == nil {
			_, err = r.u32()
		}
	case op == 0x1c: // select t*
		var n uint64
		if n, err = r.leb(); err != nil {
			return err
		}
		if n > uint64(len(r.b)) {
			return r.fail("select of %d types", n)
		}
		for range n {
			if err = r.valtype(); err != nil {
				return err
			}
		}
	case op == 0x1f: // try_table bt vec(catch)
		if err = r.blocktype(); err != nil {
			return err
		}
		var n uint64
		if n, err = r.leb(); err != nil {
			return err
		}
		if n > uint64(len(r.b)) {
			return r.fail("try_table of %d catches", n)
		}
		for range n {
			kind, err := r.byte()
			if err != nil {
				return err
			}
			if kind == 0 || kind == 1 { // catch, catch_ref: tag then label
				if _, err := r.leb(); err != nil {
					return err
				}
			}
			if _, err := r.leb(); err != nil {
				return err
			}
		}
	case op == 0x23 || op == 0x24: // global.get global.set
		if r.rw != nil {
			_, err = r.index(r.rw.globals, "global")
		} else {
			_, err = r.u32()
		}
	case op >= 0x20 && op <= 0x26: // locals, table.get/set
		_, err = r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = r.memarg()
	case op == 0x3f || op == 0x40: // memory.size memory.grow
		_, err = r.leb()
	case op == 0x41 || op == 0x42: // i32.const i64.const
		_, err = r.leb()
	case op == 0x43:
		err = r.skip(4)
	case op == 0x44:
		err = r.skip(8)
	case op == 0xd0: // ref.null heaptype
		_, err = r.leb()
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
		return r.fail("opcode %#x", op)
	}
	return err
}

func (r *reader) miscImmediates() error {
	sub, err := r.leb()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // saturating truncations
		return nil
	case sub == 8: // memory.init data mem
		if _, err := r.leb(); err != nil {
			return err
		}
		_, err = r.leb()
	case sub == 9 || sub == 13 || sub == 15 || sub == 16 || sub == 17: // data.drop elem.drop table.grow table.size table.fill
		_, err = r.leb()
	case sub == 10 || sub == 12 || sub == 14: // memory.copy table.init table.copy
		if _, err := r.leb(); err != nil {
			return err
		}
		_, err = r.leb()
	case sub == 11: // memory.fill
		_, err = r.leb()
	default:
		return r.fail("0xfc opcode %d", sub)
	}
	return err
}

func (r *reader) simdImmediates() error {
	sub, err := r.leb()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // loads, store, load*_zero
		return r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 21 && sub <= 34: // extract/replace lane
		return r.skip(1)
	case sub >= 84 && sub <= 91: // load/store lane
		if err := r.memarg(); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 0x113:
		return nil
	}
	return r.fail("0xfd opcode %d", sub)
}

func (r *reader) atomicImmediates() error {
	sub, err := r.leb()
	if err != nil {
		return err
	}
	switch {
	case sub == 3: // atomic.fence
		return r.skip(1)
	case sub <= 0x4e:
		return r.memarg()
	}
	return r.fail("0xfe opcode %d", sub)
}
