package meter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/internal/meter"
	"github.com/sandflow/sandflow/internal/wasmbin"
)

// The tests run a module and its instrumented copy side by side in wazero
// and check they compute the same thing, and that the copy calls the tick
// every meter.Interval loop-header executions.

// harness is a wazero runtime holding one guest, with the host modules the
// test guests import: the tick, and "env" (add, log, and a global).
type harness struct {
	rt     wazero.Runtime
	mod    api.Module
	ticks  atomic.Int64
	onTick func(n int64) // called after each tick is counted; may panic
	logged []uint32
}

var ctx = context.Background()

func newHarness(t testing.TB, features api.CoreFeatures) *harness {
	t.Helper()
	h := &harness{}
	cfg := wazero.NewRuntimeConfig()
	if features != 0 {
		cfg = cfg.WithCoreFeatures(features)
	}
	h.rt = wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { h.rt.Close(ctx) })
	_, err := h.rt.NewHostModuleBuilder(meter.TickModule).
		NewFunctionBuilder().WithFunc(func(context.Context) {
		n := h.ticks.Add(1)
		if h.onTick != nil {
			h.onTick(n)
		}
	}).Export(meter.TickName).
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.rt.NewHostModuleBuilder("env").
		NewFunctionBuilder().WithFunc(func(a, b uint32) uint32 { return a + b }).Export("add").
		NewFunctionBuilder().WithFunc(func(v uint32) { h.logged = append(h.logged, v) }).Export("log").
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Host modules cannot export globals: a guest module exports them.
	genv := module(
		globalSec(global(tI32, false, i32c(1000)), global(tI32, true, i32c(5))),
		exportSec(export("g", kGlobal, 0), export("mg", kGlobal, 1)),
	)
	if _, err := h.rt.InstantiateWithConfig(ctx, genv, wazero.NewModuleConfig().WithName("genv")); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) load(t testing.TB, wasm []byte) api.Module {
	t.Helper()
	mod, err := h.rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName("guest"))
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	h.mod = mod
	return mod
}

// pair is a module and its instrumented copy, each in its own runtime.
type pair struct {
	orig, inst *harness
	instBytes  []byte
}

func instrument(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out, err := meter.Instrument(wasm)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	return out
}

func newPair(t testing.TB, wasm []byte) *pair {
	return newPairFeatures(t, wasm, 0)
}

func newPairFeatures(t testing.TB, wasm []byte, features api.CoreFeatures) *pair {
	t.Helper()
	p := &pair{orig: newHarness(t, features), inst: newHarness(t, features)}
	p.orig.load(t, wasm) // first, so that an invalid test module shows as such
	p.instBytes = instrument(t, wasm)
	p.inst.load(t, p.instBytes)
	return p
}

// call calls export name in both modules and checks they agree: the same
// results, or both fail. It returns the results.
func (p *pair) call(t testing.TB, name string, args ...uint64) ([]uint64, error) {
	t.Helper()
	of, inf := p.orig.mod.ExportedFunction(name), p.inst.mod.ExportedFunction(name)
	if of == nil || inf == nil {
		t.Fatalf("export %q: original %v, instrumented %v", name, of != nil, inf != nil)
	}
	ores, oerr := of.Call(ctx, args...)
	ires, ierr := inf.Call(ctx, args...)
	if (oerr == nil) != (ierr == nil) {
		t.Fatalf("%s%v: original error %v, instrumented error %v", name, args, oerr, ierr)
	}
	if !slices.Equal(ores, ires) {
		t.Fatalf("%s%v: original returns %v, instrumented %v", name, args, ores, ires)
	}
	if p.orig.ticks.Load() != 0 {
		t.Fatalf("the original module ticked")
	}
	return ores, oerr
}

// want calls name in both and checks the result.
func (p *pair) want(t testing.TB, name string, want []uint64, args ...uint64) {
	t.Helper()
	res, err := p.call(t, name, args...)
	if err != nil {
		t.Fatalf("%s%v: %v", name, args, err)
	}
	if !slices.Equal(res, want) {
		t.Fatalf("%s%v = %v, want %v", name, args, res, want)
	}
}

func (p *pair) wantTicks(t testing.TB, headers int64) {
	t.Helper()
	if got, want := p.inst.ticks.Load(), headers/meter.Interval; got != want {
		t.Fatalf("%d ticks after %d loop-header executions, want %d", got, headers, want)
	}
}

func u64s(v ...uint32) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}

// nestedLoops is a module with no import or global section (so Instrument
// adds both) whose export nested(n, m) runs a do-while loop of n
// iterations around one of m, returning n*m (for n, m >= 1), and whose
// export while(n) runs a loop exited by br_if from an enclosing block.
func nestedLoops() []byte {
	const n, m, i, j, acc = 0, 1, 2, 3, 4
	return module(
		typeSec(functype(ops(tI32, tI32), ops(tI32)), functype(ops(tI32), ops(tI32))),
		funcSec(0, 1),
		exportSec(exportFunc("nested", 0), exportFunc("while", 1)),
		codeSec(
			fn([]byte{tI32, tI32, tI32},
				ops(opLoop, tVoid),
				/**/ i32c(0), lset(j),
				/**/ ops(opLoop, tVoid),
				/*  */ inc(acc), inc(j),
				/*  */ lget(j), lget(m), ops(opI32LtU), brIf(0),
				/**/ ops(opEnd),
				/**/ inc(i),
				/**/ lget(i), lget(n), ops(opI32LtU), brIf(0),
				ops(opEnd),
				lget(acc),
			),
			// while(n): i = 0; while i < n { i++ }; return i
			fn([]byte{tI32},
				ops(opBlock, tVoid),
				/**/ ops(opLoop, tVoid),
				/*  */ lget(1), lget(0), ops(opI32GeU), brIf(1),
				/*  */ inc(1),
				/*  */ br(0),
				/**/ ops(opEnd),
				ops(opEnd),
				lget(1),
			),
		),
	)
}

func TestNestedLoopsTickEveryInterval(t *testing.T) {
	p := newPair(t, nestedLoops())
	var headers int64
	nested := func(n, m uint32) {
		t.Helper()
		p.want(t, "nested", u64s(n*m), uint64(n), uint64(m))
		headers += int64(n) + int64(n)*int64(m)
		p.wantTicks(t, headers)
	}
	while := func(n uint32) {
		t.Helper()
		p.want(t, "while", u64s(n), uint64(n))
		headers += int64(n) + 1
		p.wantTicks(t, headers)
	}
	nested(1, 1)                  // 2 headers
	nested(1, meter.Interval-4)   // Interval-1 in all: no tick yet
	while(0)                      // the Interval-th header: the first tick
	while(meter.Interval - 2)     // 2*Interval-1
	nested(1, 1)                  // 2*Interval+1
	nested(3, 10000)              // 30003 more
	nested(100, 1000)             // 100100
	nested(1, 5*meter.Interval)   // several ticks in one inner loop
	nested(2*meter.Interval+1, 1) // and from the outer loop
	while(3 * meter.Interval)
}

// multiValue has loops and blocks with parameters and results.
func multiValue() []byte {
	const pairToPair = 1
	return module(
		typeSec(
			functype(ops(tI32), ops(tI32, tI32)),       // 0: fib
			functype(ops(tI32, tI32), ops(tI32, tI32)), // 1: loop type
			functype(ops(tI32), ops(tI32)),             // 2: sum
		),
		funcSec(0, 2),
		exportSec(exportFunc("fib", 0), exportFunc("sum", 1)),
		codeSec(
			// fib(n) for n >= 1: (a, b) = (0, 1); n times (a, b) = (b, a+b)
			fn([]byte{tI32, tI32},
				i32c(0), i32c(1),
				ops(opLoop), sleb(pairToPair),
				/**/ lset(2), lset(1),
				/**/ lget(2), lget(1), lget(2), ops(opI32Add),
				/**/ lget(0), i32c(1), ops(opI32Sub), ltee(0),
				/**/ brIf(0),
				ops(opEnd),
			),
			// sum(n) for n >= 1: n + (n-1) + ... + 1, out of a loop with a result
			fn([]byte{tI32},
				ops(opBlock, tI32),
				/**/ ops(opLoop, tI32),
				/*  */ lget(1), lget(0), ops(opI32Add), lset(1),
				/*  */ lget(1),
				/*  */ lget(0), i32c(1), ops(opI32Sub), ltee(0),
				/*  */ ops(opI32Eqz), brIf(1),
				/*  */ ops(opDrop),
				/*  */ br(0),
				/**/ ops(opEnd),
				ops(opEnd),
			),
		),
	)
}

// TestMultiValueLoops: loops and blocks with parameters and results, by
// type index and by value type. The countdown sits between the loop
// header and its parameters' consumers, so it must leave the stack alone.
func TestMultiValueLoops(t *testing.T) {
	p := newPair(t, multiValue())
	var headers int64
	fib := func(n uint32) (uint32, uint32) {
		a, b := uint32(0), uint32(1)
		for range n {
			a, b = b, a+b
		}
		return a, b
	}
	for _, n := range []uint32{1, 2, 10, 3 * meter.Interval} {
		a, b := fib(n)
		p.want(t, "fib", u64s(a, b), uint64(n))
		headers += int64(n)
		p.wantTicks(t, headers)
	}
	for _, n := range []uint32{1, 7, meter.Interval + 5} {
		p.want(t, "sum", u64s(n*(n+1)/2), uint64(n))
		headers += int64(n)
		p.wantTicks(t, headers)
	}
}

// dispatch is a module without imports, so that every defined function
// moves up by one, exercising each place a function index occurs: call,
// exports, start, element segments of every kind, ref.func in a global
// initialiser and in code, and table.init.
func dispatch() []byte {
	const (
		tRetI32   = iota // () -> i32
		tI32I32          // (i32) -> i32
		tVoidVoid        // () -> ()
	)
	const (
		fTen             = iota // 10, in an active segment with function indices (flags 0)
		fTwenty                 // 20, ditto
		fThirty                 // 30, in an active segment with expressions (flags 4)
		fForty                  // 40, ditto
		fDispatch               // dispatch(i): call_indirect table[i]
		fDirect                 // direct(x): helper(x) + ten()
		fHelper                 // helper(x): 0 + 1 + ... + x-1 in a loop
		fViaGlobal              // table[5] = global 0 (ref.func fSeventy); call it
		fStart                  // start: counts a loop of 2*Interval headers into global 1
		fStarted                // returns global 1
		fViaDeclared            // table[6] = ref.func fFifty; call it
		fFifty                  // 50, only in a declarative segment (flags 3)
		fViaDeclaredExpr        // table[7] = ref.func fSixty; call it
		fSixty                  // 60, only in a declarative segment of expressions (flags 7)
		fSeventy                // 70, only in global 0's initialiser
		fEighty                 // 80, in an active segment with an explicit table (flags 2)
		fNinety                 // 90, in a passive segment (flags 5)
		fInitPassive            // table.init slot 8 from the passive segment
		fHundred                // 100, in an active segment, explicit table, expressions (flags 6)
		fHundredTen             // 110, in a passive segment of indices (flags 1)
		fInitPassive2           // table.init slot 11 from it
		fDispatch2              // dispatch2(i): call_indirect table2[i]
	)
	ret := func(v int32) []byte { return fn(nil, i32c(v)) }
	setAndCall := func(slot int32, ref []byte) []byte {
		return fn(nil, i32c(slot), ref, ops(opTableSet, 0), i32c(slot), callIndirect(tRetI32, 0))
	}
	tableInit := func(segment uint32, dst int32) []byte {
		return fn(nil, i32c(dst), i32c(0), i32c(1), ops(opMisc), u32(12), u32(segment), u32(0))
	}
	return module(
		typeSec(functype(nil, ops(tI32)), functype(ops(tI32), ops(tI32)), functype(nil, nil)),
		funcSec(
			tRetI32, tRetI32, tRetI32, tRetI32, tI32I32, tI32I32, tI32I32, tRetI32,
			tVoidVoid, tRetI32, tRetI32, tRetI32, tRetI32, tRetI32, tRetI32, tRetI32,
			tRetI32, tVoidVoid, tRetI32, tRetI32, tVoidVoid, tI32I32,
		),
		tableSec(16, 1, 4), // segments with an explicit table index fill table 2
		globalSec(
			global(tFuncref, false, refFunc(fSeventy)),
			global(tI32, true, i32c(0)),
		),
		exportSec(
			exportFunc("dispatch", fDispatch), exportFunc("direct", fDirect),
			exportFunc("viaGlobal", fViaGlobal), exportFunc("started", fStarted),
			exportFunc("viaDeclared", fViaDeclared), exportFunc("viaDeclaredExpr", fViaDeclaredExpr),
			exportFunc("initPassive", fInitPassive), exportFunc("initPassive2", fInitPassive2),
			exportFunc("forty", fForty), exportFunc("dispatch2", fDispatch2),
		),
		startSec(fStart),
		elemSec(
			cat(u32(0), expr(i32c(0)), funcIdxs(fTen, fTwenty)),
			cat(u32(4), expr(i32c(2)), vec(expr(refFunc(fThirty)), expr(refFunc(fForty)))),
			cat(u32(3), ops(0x00), funcIdxs(fFifty)),
			cat(u32(7), ops(tFuncref), vec(expr(refFunc(fSixty)))),
			cat(u32(2), u32(2), expr(i32c(0)), ops(0x00), funcIdxs(fEighty)),
			cat(u32(5), ops(tFuncref), vec(expr(refFunc(fNinety)))),
			cat(u32(6), u32(2), expr(i32c(1)), ops(tFuncref), vec(expr(refFunc(fHundred)), expr(ops(opRefNull, tFuncref)))),
			cat(u32(1), ops(0x00), funcIdxs(fHundredTen)),
		),
		codeSec(
			ret(10), ret(20), ret(30),
			fn(nil, ops(opLoop, tVoid, opEnd), i32c(40)),
			fn(nil, lget(0), callIndirect(tRetI32, 0)),
			fn(nil, lget(0), call(fHelper), call(fTen), ops(opI32Add)),
			fn([]byte{tI32, tI32},
				ops(opBlock, tVoid),
				/**/ ops(opLoop, tVoid),
				/*  */ lget(1), lget(0), ops(opI32GeU), brIf(1),
				/*  */ lget(2), lget(1), ops(opI32Add), lset(2),
				/*  */ inc(1), br(0),
				/**/ ops(opEnd),
				ops(opEnd),
				lget(2),
			),
			setAndCall(5, gget(0)),
			fn([]byte{tI32},
				ops(opLoop, tVoid),
				/**/ inc(0),
				/**/ lget(0), i32c(2*meter.Interval), ops(opI32LtU), brIf(0),
				ops(opEnd),
				gget(1), lget(0), ops(opI32Add), gset(1),
			),
			fn(nil, gget(1)),
			setAndCall(6, refFunc(fFifty)),
			ret(50),
			setAndCall(7, refFunc(fSixty)),
			ret(60), ret(70), ret(80), ret(90),
			tableInit(5, 8),
			ret(100), ret(110),
			tableInit(7, 11),
			fn(nil, lget(0), callIndirect(tRetI32, 2)),
		),
	)
}

func TestDispatchThroughEveryFunctionIndex(t *testing.T) {
	p := newPair(t, dispatch())
	// The start function ran its loop, instrumented.
	p.wantTicks(t, 2*meter.Interval)
	p.want(t, "started", u64s(2*meter.Interval))
	for slot, want := range map[uint32]uint32{0: 10, 1: 20, 2: 30, 3: 40} {
		p.want(t, "dispatch", u64s(want), uint64(slot))
	}
	p.want(t, "dispatch2", u64s(80), 0)
	p.want(t, "dispatch2", u64s(100), 1)
	for _, c := range []struct {
		name string
		slot uint32
	}{
		// null or out of bounds: both trap
		{"dispatch", 4}, {"dispatch", 8}, {"dispatch", 11}, {"dispatch", 16}, {"dispatch", 1 << 20},
		{"dispatch2", 2}, {"dispatch2", 4},
	} {
		if _, err := p.call(t, c.name, uint64(c.slot)); err == nil {
			t.Fatalf("%s(%d) did not trap", c.name, c.slot)
		}
	}
	p.want(t, "direct", u64s(10), 0)
	p.want(t, "direct", u64s(10+45), 10)
	p.want(t, "forty", u64s(40))
	p.want(t, "viaGlobal", u64s(70))
	p.want(t, "viaDeclared", u64s(50))
	p.want(t, "viaDeclaredExpr", u64s(60))
	p.want(t, "initPassive", nil)
	p.want(t, "dispatch", u64s(90), 8)
	p.want(t, "initPassive2", nil)
	p.want(t, "dispatch", u64s(110), 11)
	// 2*Interval start headers; forty's loop twice (dispatch(3), forty());
	// helper's loop 1 + 11 times.
	p.wantTicks(t, 2*meter.Interval+14)
}

// withStart has a start function that sets a global an export returns.
func withStart() []byte {
	return module(
		typeSec(functype(nil, nil), functype(nil, ops(tI32))),
		funcSec(0, 1),
		globalSec(global(tI32, true, i32c(0))),
		exportSec(exportFunc("get", 1)),
		startSec(0),
		codeSec(fn(nil, i32c(123), gset(0)), fn(nil, gget(0))),
	)
}

// TestStartFunctionIsRemapped: a start function whose effect an export
// shows. Were the start index not moved past the new import, wazero would
// run the tick as the start function instead.
func TestStartFunctionIsRemapped(t *testing.T) {
	p := newPair(t, withStart())
	p.want(t, "get", u64s(123))
	p.wantTicks(t, 0)
}

// withImports imports functions and globals; see TestExistingImports.
func withImports() []byte {
	const (
		fAdd     = iota // imported env.add
		fLog            // imported env.log
		fRun            // run(n): for i < n { acc = add(acc, i); log(i); global 2++; global 1++ }; acc + global 0
		fCount          // global 2, defined, initialised from global 0
		fCallAdd        // callAdd(a, b) = add(a, b) through a defined function
	)
	return module(
		typeSec(
			functype(ops(tI32, tI32), ops(tI32)),
			functype(ops(tI32), nil),
			functype(ops(tI32), ops(tI32)),
			functype(nil, ops(tI32)),
		),
		importSec(
			importFunc("env", "add", 0),
			importGlobal("genv", "g", tI32, false),
			importFunc("env", "log", 1),
			importGlobal("genv", "mg", tI32, true),
		),
		funcSec(2, 3, 0),
		globalSec(global(tI32, true, gget(0))), // global 2, initialised from the import
		exportSec(
			exportFunc("run", fRun), exportFunc("count", fCount),
			exportFunc("add", fAdd), exportFunc("callAdd", fCallAdd),
		),
		codeSec(
			fn([]byte{tI32, tI32},
				ops(opLoop, tVoid),
				/**/ lget(2), lget(1), call(fAdd), lset(2),
				/**/ lget(1), call(fLog),
				/**/ gget(2), i32c(1), ops(opI32Add), gset(2),
				/**/ gget(1), i32c(1), ops(opI32Add), gset(1),
				/**/ inc(1),
				/**/ lget(1), lget(0), ops(opI32LtU), brIf(0),
				ops(opEnd),
				lget(2), gget(0), ops(opI32Add),
			),
			fn(nil, gget(2)),
			fn(nil, lget(0), lget(1), call(fAdd)),
		),
	)
}

// TestExistingImports: a module importing functions and globals. Import
// indices stay, defined functions move up, and the countdown global comes
// after the imported and defined ones (were it placed on the module's own
// global, count would come out wrong).
func TestExistingImports(t *testing.T) {
	p := newPair(t, withImports())
	p.want(t, "count", u64s(1000))
	p.want(t, "run", u64s(1000+45), 10)
	p.want(t, "count", u64s(1010))
	p.want(t, "add", u64s(7), 3, 4)
	p.want(t, "callAdd", u64s(9), 4, 5)
	p.want(t, "run", u64s(1000+uint32(meter.Interval)*uint32(meter.Interval-1)/2), meter.Interval)
	p.wantTicks(t, 10+meter.Interval)
	if !slices.Equal(p.orig.logged, p.inst.logged) {
		t.Fatalf("env.log calls differ: %d vs %d", len(p.orig.logged), len(p.inst.logged))
	}
	// The imported mutable global was counted through, not clobbered.
	for _, h := range []*harness{p.orig, p.inst} {
		if got := h.rt.Module("genv").ExportedGlobal("mg").Get(); got != 5+10+meter.Interval {
			t.Fatalf("genv.mg = %d, want %d", got, 5+10+meter.Interval)
		}
	}
}

// sectionless are modules without type, import or global sections.
func sectionless() map[string][]byte {
	return map[string][]byte{
		"empty":       module(),
		"custom only": module(customSec("hello", []byte("world"))),
		"memory and data": module(
			memSec(1),
			exportSec(export("memory", kMemory, 0)),
			dataSec(cat(u32(0), expr(i32c(16)), str("metered"))),
			customSec("trailer", []byte("x")), // wazero refuses an empty custom section at the very end
		),
		"custom first": module(customSec("first"), memSec(1), customSec("between"), exportSec(export("memory", kMemory, 0))),
	}
}

// TestModulesWithoutSections: modules lacking the type, import and global
// sections, so Instrument must add all three, in order, around whatever
// sections there are.
func TestModulesWithoutSections(t *testing.T) {
	for name, wasm := range sectionless() {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, wasm)
			cm, err := p.inst.rt.CompileModule(ctx, p.instBytes)
			if err != nil {
				t.Fatal(err)
			}
			imps := cm.ImportedFunctions()
			if len(imps) != 1 {
				t.Fatalf("%d imported functions, want the tick alone", len(imps))
			}
			if m, n, _ := imps[0].Import(); m != meter.TickModule || n != meter.TickName {
				t.Fatalf("imports %s.%s", m, n)
			}
			if len(imps[0].ParamTypes())+len(imps[0].ResultTypes()) != 0 {
				t.Fatalf("the tick has type %v -> %v", imps[0].ParamTypes(), imps[0].ResultTypes())
			}
			om, im := p.orig.mod.ExportedMemory("memory"), p.inst.mod.ExportedMemory("memory")
			if (om == nil) != (im == nil) {
				t.Fatal("memory export differs")
			}
			if om != nil {
				a, _ := om.Read(0, 64)
				b, _ := im.Read(0, 64)
				if string(a) != string(b) || (name == "memory and data" && string(a[16:23]) != "metered") {
					t.Fatalf("memory %q, instrumented %q", a, b)
				}
			}
		})
	}
}

// opcodeZoo is the module of TestOpcodeZoo.
func opcodeZoo() []byte {
	const n, i, acc, x64 = 0, 1, 2, 3
	simd := func(sub uint32, imm ...byte) []byte { return cat(ops(opSIMD), u32(sub), imm) }
	misc := func(sub uint32, imm ...byte) []byte { return cat(ops(opMisc), u32(sub), imm) }
	body := cat(
		ops(opLoop, tVoid),
		// acc = acc*31 + mem8[i & 255] (memarg with an offset)
		/**/
		lget(acc), i32c(31), ops(opI32Mul),
		/**/ lget(i), i32c(255), ops(opI32And), ops(opI32Load8U, 0x00), u32(3), ops(opI32Add), lset(acc),
		// mem32[(i&63)*4 + 512] = acc (aligned store with a two-byte offset)
		/**/
		lget(i), i32c(63), ops(opI32And), i32c(4), ops(opI32Mul), lget(acc), ops(opI32Store, 0x02), u32(512),
		// x64 = x64 * 0x100000001b3 + i (i64 constants take up to 10 bytes)
		/**/
		lget(x64), i64c(0x100000001b3), ops(opI64Mul), lget(i), ops(opI64ExtendU), ops(opI64Add), lset(x64),
		// acc ^= br_table over i&3 with blocks of different results
		/**/
		ops(opBlock, tVoid),
		/*  */ ops(opBlock, tVoid),
		/*  */ ops(opBlock, tVoid),
		/*    */ lget(i), i32c(3), ops(opI32And), ops(opBrTable), u32(3), u32(0), u32(1), u32(2), u32(2), // default: the outer block
		/*  */ ops(opEnd), lget(acc), i32c(0x1234), ops(opI32Xor), lset(acc), br(1),
		/*  */ ops(opEnd), lget(acc), i32c(7), ops(opI32Rotl), lset(acc),
		/**/ ops(opEnd),
		// acc += select (typed) of two values
		/**/
		lget(acc), i32c(3), i32c(5), lget(i), i32c(1), ops(opI32And), ops(opSelectT), byteVec(tI32), ops(opI32Add), lset(acc),
		// acc += trunc_sat(f64(i) * 1.5 + f32->f64(0.25)) (float constants, saturating conversion)
		/**/
		lget(acc), lget(i), ops(opF64ConvertI), ops(opF64Const), f64bits(1.5), ops(opF64Mul),
		/**/ ops(opF32Const), f32bits(0.25), ops(0xbb), ops(opF64Add), misc(2), ops(opI32Add), lset(acc),
		// acc += i32x4.extract_lane 2 (v128.const {i, 2i, 3i, 4i} + splat(acc)) (SIMD constants and lanes)
		/**/
		lget(acc),
		/**/ simd(12, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0), lget(acc), simd(17), simd(174),
		/**/ simd(12, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6),
		/**/ simd(13, 0, 17, 2, 19, 4, 21, 6, 23, 8, 25, 10, 27, 12, 29, 14, 31), // i8x16.shuffle
		/**/ simd(27, 2), ops(opLoop, tVoid, opEnd), ops(opI32Add), lset(acc), // a loop right after a lane immediate
		// v128.store at 1024 and load lane 1 back (SIMD memarg and lane immediate)
		/**/
		i32c(1024), lget(acc), simd(17), simd(11, 0x04), u32(0),
		/**/ lget(acc), i32c(1024), simd(12, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), simd(86, 0x02, 0x00, 3), simd(27, 3), ops(opI32Add), lset(acc), // lane 3: the loop opcode
		// memory.fill and memory.copy (bulk memory immediates)
		/**/
		i32c(2048), lget(i), i32c(16), misc(11, 0),
		/**/ i32c(256), i32c(2048), i32c(8), misc(10, 0, 0),
		// sign extension, memory.size, ref.null/ref.is_null
		/**/
		lget(acc), ops(opI32Extend8S), ops(opMemorySize, 0), ops(opI32Add), ops(opRefNull, tFuncref), ops(opRefIsNull), ops(opI32Add), ops(opDrop),
		/**/ inc(i),
		/**/ lget(i), lget(n), ops(opI32LtU), brIf(0),
		ops(opEnd),
		lget(acc), lget(x64), ops(opI32WrapI64), ops(opI32Xor),
	)
	init := make([]byte, 256)
	for k := range init {
		init[k] = byte(k*7 + 3)
	}
	return module(
		typeSec(functype(ops(tI32), ops(tI32))),
		funcSec(0),
		memSec(1),
		exportSec(exportFunc("zoo", 0), export("memory", kMemory, 0)),
		section(secDataCount, u32(1)),
		codeSec(fn([]byte{tI32, tI32, tI64}, body)),
		dataSec(cat(u32(0), expr(i32c(0)), cat(u32(uint32(len(init))), init))),
	)
}

// TestOpcodeZoo runs loops over a spread of instructions with immediates of
// every shape (memargs, br_table, typed select, 64-bit and float constants,
// SIMD, bulk memory, saturating truncation): had the rewriter misjudged the
// length of one immediate, it would lose its place in the code and either
// fail, break validation, or change what the code computes.
func TestOpcodeZoo(t *testing.T) {
	p := newPair(t, opcodeZoo())
	var headers int64
	for _, n := range []uint32{1, 2, 3, 4, 100, meter.Interval + 1} {
		p.call(t, "zoo", uint64(n))
		headers += 2 * int64(n) // the loop and the one inside
		p.wantTicks(t, headers)
	}
	a, _ := p.orig.mod.ExportedMemory("memory").Read(0, 4096)
	b, _ := p.inst.mod.ExportedMemory("memory").Read(0, 4096)
	if string(a) != string(b) {
		t.Fatal("memories differ")
	}
}

func f64bits(v float64) []byte {
	var b []byte
	u := math.Float64bits(v)
	for k := range 8 {
		b = append(b, byte(u>>(8*k)))
	}
	return b
}

func f32bits(v float32) []byte {
	var b []byte
	u := math.Float32bits(v)
	for k := range 4 {
		b = append(b, byte(u>>(8*k)))
	}
	return b
}

// named is a module with a name section (module, function and local
// names) and an import, so that names of imports stay and names of defined
// functions must move with them.
func named() []byte {
	const (
		fImported = iota
		fOuter
		fMiddle
		fInner
		fOK
	)
	return module(
		typeSec(functype(nil, ops(tI32)), functype(ops(tI32, tI32), ops(tI32))),
		importSec(importFunc("env", "add", 1)),
		funcSec(0, 0, 1, 0),
		exportSec(exportFunc("boom", fOuter), exportFunc("inner", fInner), exportFunc("ok", fOK), exportFunc("add", fImported)),
		codeSec(
			fn(nil, call(fMiddle)),
			fn(nil, i32c(1), i32c(2), call(fInner)),
			fn(nil, ops(opLoop, tVoid, opEnd), lget(0), lget(1), call(fImported), ops(opUnreachable)),
			fn(nil, i32c(3), i32c(4), call(fImported)),
		),
		customSec("producers", []byte{0x00}),
		customSec("name",
			nameSubsection(0, str("named")),
			nameSubsection(1, nameMap(
				naming{fImported, "imported_add"}, naming{fOuter, "outer"}, naming{fMiddle, "middle"},
				naming{fInner, "inner"}, naming{fOK, "ok_func"})),
			nameSubsection(2, indirectNameMap(indirect{fInner, []naming{{0, "lhs"}, {1, "rhs"}}})),
		),
	)
}

// stackRecorder is a function listener that records the call stack, by
// debug name, each time a function is entered.
type stackRecorder struct{ stacks [][]string }

func (r *stackRecorder) NewFunctionListener(api.FunctionDefinition) experimental.FunctionListener {
	return experimental.FunctionListenerFunc(func(_ context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, si experimental.StackIterator) {
		var stack []string
		for si.Next() {
			stack = append(stack, si.Function().Definition().DebugName())
		}
		r.stacks = append(r.stacks, stack)
	})
}

func TestNameSectionFollowsTheShift(t *testing.T) {
	orig := named()
	inst := instrument(t, orig)
	var defs [2]map[string]api.FunctionDefinition
	var imports [2][]string
	var stacks [2][][]string
	for k, wasm := range [][]byte{orig, inst} {
		h := newHarness(t, 0)
		rec := &stackRecorder{}
		cm, err := h.rt.CompileModule(experimental.WithFunctionListenerFactory(ctx, rec), wasm)
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Name(); got != "named" {
			t.Fatalf("module name %q", got)
		}
		defs[k] = cm.ExportedFunctions()
		for _, d := range cm.ImportedFunctions() {
			if m, _, _ := d.Import(); m != meter.TickModule {
				imports[k] = append(imports[k], d.DebugName())
			}
		}
		mod, err := h.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig())
		if err != nil {
			t.Fatal(err)
		}
		var ee *sys.ExitError
		if _, err := mod.ExportedFunction("boom").Call(ctx); err == nil || errors.As(err, &ee) {
			t.Fatalf("boom: %v, want a trap", err)
		}
		if res, err := mod.ExportedFunction("ok").Call(ctx); err != nil || res[0] != 7 {
			t.Fatalf("ok() = %v, %v", res, err)
		}
		stacks[k] = rec.stacks
	}
	for name, od := range defs[0] {
		id := defs[1][name]
		if id == nil {
			t.Fatalf("export %q missing", name)
		}
		if od.DebugName() != id.DebugName() || !slices.Equal(od.ParamNames(), id.ParamNames()) {
			t.Errorf("export %q: debug name %q params %q, instrumented %q %q",
				name, od.DebugName(), od.ParamNames(), id.DebugName(), id.ParamNames())
		}
	}
	if got := defs[1]["inner"].DebugName(); got != "named.inner" {
		t.Errorf("inner is named %q", got)
	}
	if got := defs[1]["inner"].ParamNames(); !slices.Equal(got, []string{"lhs", "rhs"}) {
		t.Errorf("inner's params are named %q", got)
	}
	if !slices.Equal(imports[0], imports[1]) || len(imports[0]) != 1 || imports[0][0] != "named.imported_add" {
		t.Errorf("imported functions are named %q, instrumented %q", imports[0], imports[1])
	}
	// The stack at each function entry, boom() and then ok(); the listener
	// sees guest functions only, so the tick does not show.
	want := [][]string{
		{"named.outer"},
		{"named.middle", "named.outer"},
		{"named.inner", "named.middle", "named.outer"},
		{"named.ok_func"},
	}
	for k := range stacks {
		if fmt.Sprint(stacks[k]) != fmt.Sprint(want) {
			t.Errorf("stacks (instrumented=%v):\n%q\nwant\n%q", k == 1, stacks[k], want)
		}
	}
}

// spinners are modules whose export spin never returns.
func spinners() map[string][]byte {
	spin := func(body ...[]byte) []byte {
		return module(
			typeSec(functype(nil, nil)),
			funcSec(0, 0),
			exportSec(exportFunc("spin", 0)),
			codeSec(fn(nil, body...), fn(nil, ops(opLoop, tVoid, opEnd))),
		)
	}
	return map[string][]byte{
		"loop br 0":     spin(ops(opLoop, tVoid, opBr, 0, opEnd)),
		"loop br_if 0":  spin(ops(opLoop, tVoid), i32c(1), brIf(0), ops(opEnd)),
		"br_table back": spin(ops(opLoop, tVoid, opBlock, tVoid), i32c(0), ops(opBrTable), u32(0), u32(1), ops(opEnd, opEnd)),
		"inner loop exits, outer repeats": spin(
			ops(opLoop, tVoid),
			/**/ ops(opLoop, tVoid, opEnd),
			/**/ br(0),
			ops(opEnd)),
		"loop in a called function": spin(ops(opLoop, tVoid), call(1), br(0), ops(opEnd)),
	}
}

// TestInfiniteLoopCanBeStopped: a guest spinning in a loop keeps calling
// the tick, so the host can end it there. The tick panics with an exit
// error after a few calls; the call must return that error.
func TestInfiniteLoopCanBeStopped(t *testing.T) {
	const stopAfter = 5
	for name, wasm := range spinners() {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, 0)
			h.onTick = func(n int64) {
				if n >= stopAfter {
					panic(sys.NewExitError(42))
				}
			}
			mod := h.load(t, instrument(t, wasm))
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction("spin").Call(ctx)
				done <- err
			}()
			select {
			case err := <-done:
				var ee *sys.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 42 {
					t.Fatalf("spin returned %v, want exit code 42", err)
				}
				if n := h.ticks.Load(); n != stopAfter {
					t.Fatalf("%d ticks, want %d", n, stopAfter)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the loop did not stop (%d ticks)", h.ticks.Load()) // the goroutine leaks
			}
		})
	}
}

// TestErrors: what Instrument refuses, it refuses with ErrUnsupported.
func TestErrors(t *testing.T) {
	valid := nestedLoops()
	for name, wasm := range map[string][]byte{
		"nil":                  nil,
		"not wasm":             []byte("\x7fELF\x02\x01\x01\x00"),
		"component":            []byte("\x00asm\x0d\x00\x01\x00"),
		"truncated section":    valid[:len(valid)-3],
		"section past the end": module(cat([]byte{secType}, u32(100), vec())),
		"GC opcode": module(
			typeSec(functype(nil, nil)), funcSec(0),
			codeSec(fn(nil, ops(0xfb, 0x00))),
		),
		"unknown opcode": module(
			typeSec(functype(nil, nil)), funcSec(0),
			codeSec(fn(nil, ops(0x27))),
		),
		"code after the end": module(
			typeSec(functype(nil, nil)), funcSec(0),
			codeSec(cat(u32(4), ops(0x00, opEnd, opNop, opEnd))),
		),
		"element flags 8": module(typeSec(), elemSec(u32(8))),
		"LEB over 10 bytes": module(
			typeSec(functype(nil, nil)), funcSec(0),
			codeSec(fn(nil, ops(opI32Const, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), ops(opDrop))),
		),
	} {
		t.Run(name, func(t *testing.T) {
			out, err := meter.Instrument(wasm)
			if !errors.Is(err, meter.ErrUnsupported) {
				t.Fatalf("Instrument = %d bytes, %v; want ErrUnsupported", len(out), err)
			}
		})
	}
}

// exceptions throws from a function with a loop and catches with
// try_table (a block the rewriter must count to find the function's end).
func exceptions() []byte {
	const secTag = 13
	return module(
		typeSec(functype(ops(tI32), nil), functype(ops(tI32), ops(tI32))),
		funcSec(0, 1),
		section(secTag, vec(cat(ops(0x00), u32(0)))),
		exportSec(exportFunc("catch", 1)),
		codeSec(
			fn(nil, ops(opLoop, tVoid, opEnd), lget(0), ops(0x08, 0x00)), // throw 0
			fn(nil,
				ops(opBlock, tI32),
				/**/ ops(0x1f, tVoid), vec(cat(ops(0x00), u32(0), u32(0))), // try_table (catch 0 0)
				/*  */ ops(opLoop, tVoid, opEnd),
				/*  */ lget(0), call(0),
				/**/ ops(opEnd),
				/**/ i32c(-1),
				ops(opEnd),
				ops(opLoop, tVoid, opEnd),
				i32c(2), ops(opI32Mul),
			),
		),
	)
}

func TestExceptions(t *testing.T) {
	p := newPairFeatures(t, exceptions(), api.CoreFeaturesV2|experimental.CoreFeaturesExceptionHandling)
	p.want(t, "catch", u64s(14), 7)
	p.want(t, "catch", u64s(0), 0)
}

// countdowns is how many countdowns Instrument put in out, made from in.
func countdowns(in, out []byte) int {
	// i32.const 1; i32.sub; global.set: the middle of every countdown.
	pat := []byte{opI32Const, 0x01, opI32Sub, opGlobalSet}
	return bytes.Count(out, pat) - bytes.Count(in, pat)
}

// TestLegacyExceptions: try, catch, catch_all and delegate, which wazero
// refuses, so only the rewrite is checked: every loop, including those
// after a delegate closes a try, gets its countdown.
func TestLegacyExceptions(t *testing.T) {
	const (
		opTry      = 0x06
		opCatch    = 0x07
		opRethrow  = 0x09
		opDelegate = 0x18
		opCatchAll = 0x19
	)
	loop := ops(opLoop, tVoid, opEnd)
	wasm := module(
		typeSec(functype(ops(tI32), ops(tI32))),
		funcSec(0, 0),
		section(13, vec(cat(ops(0x00), u32(0)))),
		codeSec(
			fn(nil,
				ops(opTry, tI32),
				/**/ ops(opTry, tI32), loop, lget(0), ops(0x08, 0x00), i32c(-1), ops(opDelegate, 0x00),
				ops(opCatch, 0x00), loop,
				ops(opCatchAll), loop, i32c(0),
				ops(opEnd),
				loop,
			),
			fn(nil,
				ops(opTry, tVoid), loop, ops(opCatchAll), ops(opRethrow, 0x00), ops(opEnd),
				ops(opTry, tVoid), ops(opDelegate, 0x00),
				loop, lget(0),
			),
		),
	)
	out := instrument(t, wasm)
	if got := countdowns(wasm, out); got != 6 {
		t.Fatalf("%d countdowns, want 6 (one per loop)", got)
	}
}

// tailCalls counts down by tail-calling itself.
func tailCalls() []byte {
	return module(
		typeSec(functype(ops(tI32, tI32), ops(tI32))),
		funcSec(0),
		exportSec(exportFunc("count", 0)),
		codeSec(fn(nil,
			lget(0), ops(opI32Eqz), ops(opIf, tI32), lget(1), ops(opElse),
			/**/ lget(0), i32c(1), ops(opI32Sub), lget(1), i32c(1), ops(opI32Add), ops(0x12), u32(0), // return_call 0
			ops(opEnd))),
	)
}

// TestTailCalls: return_call takes a function index, moved like call's.
func TestTailCalls(t *testing.T) {
	p := newPairFeatures(t, tailCalls(), api.CoreFeaturesV2|experimental.CoreFeaturesTailCall)
	p.want(t, "count", u64s(1000), 1000, 0)
}

// guests are the directories of the repository's guests, built from source.
var guests = []string{
	"examples/deploy",
	"host/testdata/guests/kitchen",
	"examples/approve-deadline",
	"examples/remind",
	"host/testdata/guests/deploy-v2",
	"host/testdata/guests/rawabi",
}

// TestRealGuests instruments every guest the repository builds and checks
// wazero compiles the result, that it has the same exports (with the same
// types and debug names) and one more import, the tick. The first two are
// compiled as the host compiles them; the others only decoded and
// validated (wazero's interpreter), which is quicker and checks the same.
func TestRealGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds guests from source")
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for k, dir := range guests {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			path, err := guestbuild.Build(filepath.Join(root, dir))
			if err != nil {
				t.Fatal(err)
			}
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			inst := instrument(t, orig)
			// The data section grows by the zeros that join its
			// segments (mergeData); the rest is the countdowns.
			od, id := sectionSize(t, orig, secData), sectionSize(t, inst, secData)
			growth := float64((len(inst)-id)-(len(orig)-od)) / float64(len(orig)-od)
			t.Logf("%d bytes, instrumented %d: %+d bytes outside data (%+.2f%%), %d loops; data %d -> %d bytes",
				len(orig), len(inst), (len(inst)-id)-(len(orig)-od), 100*growth, countdowns(orig, inst), od, id)
			if growth > 0.1 {
				t.Errorf("instrumenting grew the guest's code by %.1f%%", 100*growth)
			}
			if id > od+od/2 {
				t.Errorf("merging data segments grew the data section from %d to %d bytes", od, id)
			}
			interp := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
			defer interp.Close(ctx)
			ocm, err := interp.CompileModule(ctx, orig)
			if err != nil {
				t.Fatal(err)
			}
			rt := interp
			if k < 2 {
				rt = wazero.NewRuntime(ctx)
				defer rt.Close(ctx)
			}
			icm, err := rt.CompileModule(ctx, inst)
			if err != nil {
				t.Fatalf("wazero refuses the instrumented guest: %v", err)
			}
			checkSameInterface(t, ocm, icm, true)
		})
	}
}

// checkSameInterface checks inst has orig's exports, with the same types
// (and debug names, if names is set), and orig's imports plus the tick.
func checkSameInterface(t testing.TB, orig, inst wazero.CompiledModule, names bool) {
	t.Helper()
	describe := func(d api.FunctionDefinition) string {
		m, n, _ := d.Import()
		name, params := d.Name(), d.ParamNames() // from the name section
		if !names {
			name, params = "", nil
		} else if name != "" {
			name = d.DebugName() // else the debug name has the index, which moves
		}
		return fmt.Sprintf("%s %s.%s %v %v %v->%v", name, m, n, d.ExportNames(), params, d.ParamTypes(), d.ResultTypes())
	}
	var oi, ii []string
	for _, d := range orig.ImportedFunctions() {
		oi = append(oi, describe(d))
	}
	for _, d := range inst.ImportedFunctions() {
		ii = append(ii, describe(d))
	}
	// The tick comes last, unnamed.
	if want := append(oi, fmt.Sprintf(" %s.%s [] [] []->[]", meter.TickModule, meter.TickName)); !slices.Equal(ii, want) {
		t.Errorf("imported functions\n%q\ninstrumented\n%q", oi, ii)
	}
	oe, ie := orig.ExportedFunctions(), inst.ExportedFunctions()
	if len(oe) != len(ie) {
		t.Errorf("%d exported functions, instrumented %d", len(oe), len(ie))
	}
	for name, d := range oe {
		if id, ok := ie[name]; !ok || describe(d) != describe(id) {
			t.Errorf("export %q: %s; instrumented: %v", name, describe(d), ok && describe(id) != "")
		}
	}
	if len(orig.ExportedMemories()) != len(inst.ExportedMemories()) {
		t.Errorf("exported memories differ")
	}
}

// Regression tests for bugs found in Instrument. They fail until the bug
// they name is fixed.

// wantInvalid checks that a module wazero refuses stays refused once
// instrumented (or that Instrument refuses it): the host validates only the
// instrumented module, so Instrument must not turn an invalid module into
// a valid one.
func wantInvalid(t *testing.T, wasm []byte, features api.CoreFeatures) {
	t.Helper()
	h := newHarness(t, features)
	_, inErr := h.rt.CompileModule(ctx, wasm)
	if inErr == nil {
		t.Fatal("test module: wazero accepts it")
	}
	out, err := meter.Instrument(wasm)
	if err != nil {
		if !errors.Is(err, meter.ErrUnsupported) {
			t.Fatalf("Instrument: %v", err)
		}
		return
	}
	if _, err := h.rt.CompileModule(ctx, out); err == nil {
		t.Errorf("wazero refuses the module (%v) but accepts it instrumented", inErr)
	}
}

// forgedCounter sets global 0 in its loop, a global the module does not
// have; instrumented, global 0 is the countdown.
func forgedCounter() []byte {
	return module(
		typeSec(functype(ops(tI32), nil)),
		funcSec(0),
		exportSec(exportFunc("run", 0)),
		codeSec(fn(nil,
			ops(opLoop, tVoid),
			/**/ i32c(1000), gset(0),
			/**/ lget(0), i32c(1), ops(opI32Sub), ltee(0), brIf(0),
			ops(opEnd))),
	)
}

// TestBugCounterGlobalCanBeForged: a module that uses the index the
// countdown global will have (the number of globals it has) is invalid,
// but Instrument makes it valid, and its code then owns the countdown:
// setting it in every iteration keeps the tick from ever being called, so
// the guest escapes the host's CPU limit (and, spinning without a call
// into Go, blocks the garbage collector's stop-the-world). Instrument must
// refuse such a module (or give out one wazero refuses).
func TestBugCounterGlobalCanBeForged(t *testing.T) {
	wantInvalid(t, forgedCounter(), 0)
	out, err := meter.Instrument(forgedCounter())
	if err != nil {
		return
	}
	h := newHarness(t, 0)
	if _, err := h.rt.CompileModule(ctx, out); err != nil {
		return
	}
	mod := h.load(t, out)
	if _, err := mod.ExportedFunction("run").Call(ctx, 10*meter.Interval); err != nil {
		t.Fatal(err)
	}
	if n := h.ticks.Load(); n != 10 {
		t.Errorf("%d ticks in 10*Interval loop iterations, want 10", n)
	}
}

// TestBugInvalidModulesBecomeValid: other invalid modules Instrument makes
// valid, by giving meaning to an index that had none or by rewriting a
// malformed section into a well-formed one.
func TestBugInvalidModulesBecomeValid(t *testing.T) {
	void := typeSec(functype(nil, nil))
	for name, wasm := range map[string][]byte{
		// remap: 0xffffffff + 1 wraps to 0, here the tick.
		"function index 0xffffffff": module(void, funcSec(0), exportSec(exportFunc("f", 0)), codeSec(fn(nil, call(0xffffffff)))),
		// Type 1 does not exist; instrumented, it is the tick's type.
		"type index of the tick's type": module(typeSec(functype(nil, ops(tI32))), funcSec(1), codeSec(fn(nil))),
		// The start section is rewritten from its index alone.
		"byte after the start index": module(void, funcSec(0), section(secStart, u32(0), ops(0x00)), codeSec(fn(nil))),
		// The export, global, element and code sections are rewritten
		// entry by entry, dropping what follows the last.
		"byte after the exports":  module(void, funcSec(0), section(secExport, vec(exportFunc("f", 0)), ops(0x00)), codeSec(fn(nil))),
		"byte after the globals":  module(section(secGlobal, vec(global(tI32, false, i32c(1))), ops(0x00))),
		"byte after the elements": module(void, funcSec(0), tableSec(1), section(secElement, vec(cat(u32(0), expr(i32c(0)), funcIdxs(0))), ops(0x00)), codeSec(fn(nil))),
		"byte after the bodies":   module(void, funcSec(0), section(secCode, vec(fn(nil)), ops(0x00))),
		// Global 0 does not exist; instrumented, it is the countdown.
		"export of the countdown global": module(exportSec(export("g", kGlobal, 0))),
		// A function index in six bytes (at most five are allowed) is
		// re-encoded in one.
		"function index of six bytes": module(void, funcSec(0, 0), codeSec(fn(nil, ops(opCall, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00)), fn(nil))),
	} {
		t.Run(name, func(t *testing.T) { wantInvalid(t, wasm, 0) })
	}
}

// tableInitialiser has a table whose initialiser expression (0x40 0x00
// prefix, which wazero accepts with the host's default features) is
// ref.func 1, called through call_indirect.
func tableInitialiser() []byte {
	return module(
		typeSec(functype(nil, ops(tI32))),
		funcSec(0, 0, 0),
		section(secTable, vec(cat(ops(0x40, 0x00, tFuncref, 0x00), u32(2), expr(refFunc(1))))),
		exportSec(exportFunc("viaTable", 2)),
		codeSec(fn(nil, i32c(11)), fn(nil, i32c(22)), fn(nil, i32c(1), callIndirect(0, 0))),
	)
}

// TestBugTableInitialiserNotRemapped: the table section is copied as it
// is, so a ref.func in a table's initialiser keeps its old index and names
// the function before it (or the tick).
func TestBugTableInitialiserNotRemapped(t *testing.T) {
	p := newPair(t, tableInitialiser())
	p.want(t, "viaTable", u64s(22))
}

// TestBugRefAsNonNullHasNoImmediate: immediates() gives ref.as_non_null
// (0xd4) a label immediate, which belongs to br_on_null (0xd5). Here it
// swallows the call opcode after it, so the call's function index is not
// moved and the instrumented module calls the function before.
func TestBugRefAsNonNullHasNoImmediate(t *testing.T) {
	const opRefAsNonNull = 0xd4
	wasm := module(
		typeSec(functype(nil, ops(tI32))),
		funcSec(0, 0, 0),
		exportSec(exportFunc("f", 2)),
		elemSec(cat(u32(3), ops(0x00), funcIdxs(0))), // declares ref.func 0
		codeSec(
			fn(nil, i32c(11)),
			fn(nil, i32c(22)),
			fn([]byte{tI32}, refFunc(0), ops(opRefAsNonNull), call(1), lset(0), ops(opDrop), lget(0)),
		),
	)
	p := newPairFeatures(t, wasm, api.CoreFeaturesV2|experimental.CoreFeaturesTypedFunctionReferences)
	p.want(t, "f", u64s(22))
}

// TestBugBrOnNullHasALabel: br_on_null (0xd5) is read without its label
// immediate, so the label is read as an opcode: label 2 as block, which
// desynchronises the rewriter and makes it refuse a valid module.
func TestBugBrOnNullHasALabel(t *testing.T) {
	const opBrOnNull = 0xd5
	wasm := module(
		typeSec(functype(nil, ops(tI32))),
		funcSec(0),
		exportSec(exportFunc("f", 0)),
		codeSec(fn(nil,
			ops(opBlock, tVoid, opBlock, tVoid, opBlock, tVoid),
			/**/ ops(opRefNull, tFuncref, opBrOnNull, 2, opDrop),
			ops(opEnd, opEnd, opEnd),
			ops(opLoop, tVoid, opEnd),
			i32c(5),
		)),
	)
	p := newPairFeatures(t, wasm, api.CoreFeaturesV2|experimental.CoreFeaturesTypedFunctionReferences)
	p.want(t, "f", u64s(5))
	p.wantTicks(t, 1)
}

// TestBugTailCallsAreNotMetered: a loop written as tail recursion passes no
// loop header and, unlike plain recursion, never overflows the stack, so
// it runs without ever calling the tick: Instrument accepts and rewrites
// return_call but does not meter it. (The host does not enable tail calls
// today; wazero offers them as experimental.CoreFeaturesTailCall.)
func TestBugTailCallsAreNotMetered(t *testing.T) {
	p := newPairFeatures(t, tailCalls(), api.CoreFeaturesV2|experimental.CoreFeaturesTailCall)
	p.want(t, "count", u64s(10*meter.Interval), 10*meter.Interval, 0)
	if p.inst.ticks.Load() == 0 {
		t.Errorf("no tick in %d tail calls", 10*meter.Interval)
	}
}

// TestBugLabelNamesNotRemapped: in the name section, the label names
// (subsection 3 of the extended name section) are keyed by function index
// like the local names (2), but only 1 and 2 are remapped.
func TestBugLabelNamesNotRemapped(t *testing.T) {
	wasm := module(
		typeSec(functype(nil, nil)),
		importSec(importFunc("env", "f", 0)),
		funcSec(0),
		codeSec(fn([]byte{tI32}, ops(opBlock, tVoid, opEnd))),
		customSec("name",
			nameSubsection(1, nameMap(naming{1, "g"})),
			nameSubsection(2, indirectNameMap(indirect{1, []naming{{0, "x"}}})),
			nameSubsection(3, indirectNameMap(indirect{1, []naming{{0, "label"}}})),
		),
	)
	subs := nameSubsections(t, instrument(t, wasm))
	for id := byte(1); id <= 3; id++ {
		if f, _ := readULEB(subs[id][1:]); f != 2 { // the vector's first (only) entry
			t.Errorf("name subsection %d names function %d, want 2", id, f)
		}
	}
}

// nameSubsections returns the subsections of the module's name section.
func nameSubsections(t testing.TB, wasm []byte) map[byte][]byte {
	t.Helper()
	subs := map[byte][]byte{}
	r := wasm[8:]
	next := func(b []byte) (uint64, []byte) {
		v, n := readULEB(b)
		if n == 0 {
			t.Fatal("bad LEB")
		}
		return v, b[n:]
	}
	for len(r) > 0 {
		id := r[0]
		size, rest := next(r[1:])
		body := rest[:size]
		r = rest[size:]
		if id != secCustom {
			continue
		}
		l, body := next(body)
		if string(body[:l]) != "name" {
			continue
		}
		for body = body[l:]; len(body) > 0; {
			sid := body[0]
			size, rest := next(body[1:])
			subs[sid] = rest[:size]
			body = rest[size:]
		}
	}
	return subs
}

// readULEB decodes an unsigned LEB128 and returns it and its length (0 if
// malformed).
func readULEB(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// A small WebAssembly assembler for the tests: each helper returns the
// encoding of one construct, and they nest, so a module reads like its text
// format, section by section. Nothing is validated here; wazero does that.

// Value and block types.
const (
	tI32     byte = 0x7f
	tI64     byte = 0x7e
	tFuncref byte = 0x70
	tVoid    byte = 0x40 // empty block type
)

// Opcodes without immediates, or whose immediates the tests write by hand.
const (
	opUnreachable  byte = 0x00
	opNop          byte = 0x01
	opBlock        byte = 0x02
	opLoop         byte = 0x03
	opIf           byte = 0x04
	opElse         byte = 0x05
	opEnd          byte = 0x0b
	opBr           byte = 0x0c
	opBrIf         byte = 0x0d
	opBrTable      byte = 0x0e
	opCall         byte = 0x10
	opCallIndirect byte = 0x11
	opDrop         byte = 0x1a
	opSelectT      byte = 0x1c
	opLocalGet     byte = 0x20
	opLocalSet     byte = 0x21
	opLocalTee     byte = 0x22
	opGlobalGet    byte = 0x23
	opGlobalSet    byte = 0x24
	opTableSet     byte = 0x26
	opI32Load8U    byte = 0x2d
	opI32Store     byte = 0x36
	opMemorySize   byte = 0x3f
	opI32Const     byte = 0x41
	opI64Const     byte = 0x42
	opF32Const     byte = 0x43
	opF64Const     byte = 0x44
	opI32Eqz       byte = 0x45
	opI32LtU       byte = 0x49
	opI32GeU       byte = 0x4f
	opI32Add       byte = 0x6a
	opI32Sub       byte = 0x6b
	opI32Mul       byte = 0x6c
	opI32And       byte = 0x71
	opI32Xor       byte = 0x73
	opI32Rotl      byte = 0x77
	opI64Add       byte = 0x7c
	opI64Mul       byte = 0x7e
	opF64Add       byte = 0xa0
	opF64Mul       byte = 0xa2
	opI32WrapI64   byte = 0xa7
	opI64ExtendU   byte = 0xad
	opF64ConvertI  byte = 0xb7 // f64.convert_i32_s
	opI32Extend8S  byte = 0xc0
	opRefNull      byte = 0xd0
	opRefIsNull    byte = 0xd1
	opRefFunc      byte = 0xd2
	opMisc         byte = 0xfc
	opSIMD         byte = 0xfd
)

// Section ids.
const (
	secCustom    byte = 0
	secType      byte = 1
	secImport    byte = 2
	secFunction  byte = 3
	secTable     byte = 4
	secMemory    byte = 5
	secGlobal    byte = 6
	secExport    byte = 7
	secStart     byte = 8
	secElement   byte = 9
	secCode      byte = 10
	secData      byte = 11
	secDataCount byte = 12
)

// External kinds.
const (
	kFunc   byte = 0
	kMemory byte = 2
	kGlobal byte = 3
)

func uleb(v uint64) []byte { return wasmbin.AppendULEB(nil, v) }

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func u32(v uint32) []byte { return uleb(uint64(v)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// ops is a literal run of bytes.
func ops(b ...byte) []byte { return b }

// vec is a vector: its length, then its items.
func vec(items ...[]byte) []byte { return cat(u32(uint32(len(items))), cat(items...)) }

// byteVec is a vector of one-byte items (value types).
func byteVec(b ...byte) []byte { return cat(u32(uint32(len(b))), b) }

func str(s string) []byte { return cat(u32(uint32(len(s))), []byte(s)) }

func section(id byte, parts ...[]byte) []byte {
	body := cat(parts...)
	return cat([]byte{id}, u32(uint32(len(body))), body)
}

func module(sections ...[]byte) []byte {
	return cat([]byte("\x00asm\x01\x00\x00\x00"), cat(sections...))
}

// Sections.

func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, byteVec(params...), byteVec(results...))
}
func typeSec(types ...[]byte) []byte { return section(secType, vec(types...)) }
func importSec(imports ...[]byte) []byte {
	return section(secImport, vec(imports...))
}
func importFunc(mod, name string, typ uint32) []byte {
	return cat(str(mod), str(name), []byte{kFunc}, u32(typ))
}
func importGlobal(mod, name string, vt byte, mutable bool) []byte {
	return cat(str(mod), str(name), []byte{kGlobal, vt, mut(mutable)})
}
func funcSec(typeIdx ...uint32) []byte {
	var items [][]byte
	for _, t := range typeIdx {
		items = append(items, u32(t))
	}
	return section(secFunction, vec(items...))
}

// tableSec defines funcref tables of the given minimum sizes.
func tableSec(mins ...uint32) []byte {
	var items [][]byte
	for _, m := range mins {
		items = append(items, cat([]byte{tFuncref, 0x00}, u32(m)))
	}
	return section(secTable, vec(items...))
}
func memSec(minPages uint32) []byte {
	return section(secMemory, vec(cat([]byte{0x00}, u32(minPages))))
}
func mut(m bool) byte {
	if m {
		return 1
	}
	return 0
}
func globalSec(globals ...[]byte) []byte { return section(secGlobal, vec(globals...)) }
func global(vt byte, mutable bool, init ...[]byte) []byte {
	return cat([]byte{vt, mut(mutable)}, cat(init...), []byte{opEnd})
}
func exportSec(exports ...[]byte) []byte { return section(secExport, vec(exports...)) }
func export(name string, kind byte, idx uint32) []byte {
	return cat(str(name), []byte{kind}, u32(idx))
}
func exportFunc(name string, idx uint32) []byte { return export(name, kFunc, idx) }
func startSec(f uint32) []byte                  { return section(secStart, u32(f)) }
func elemSec(segments ...[]byte) []byte         { return section(secElement, vec(segments...)) }
func codeSec(bodies ...[]byte) []byte           { return section(secCode, vec(bodies...)) }
func dataSec(segments ...[]byte) []byte         { return section(secData, vec(segments...)) }
func customSec(name string, payload ...[]byte) []byte {
	return section(secCustom, str(name), cat(payload...))
}

// expr is a constant expression: its instructions and an end.
func expr(code ...[]byte) []byte { return cat(cat(code...), []byte{opEnd}) }

// funcIdxs is a vector of function indices.
func funcIdxs(fs ...uint32) []byte {
	var items [][]byte
	for _, f := range fs {
		items = append(items, u32(f))
	}
	return vec(items...)
}

// fn is a function body with one local of each type in locals.
func fn(locals []byte, code ...[]byte) []byte {
	var groups [][]byte
	for _, t := range locals {
		groups = append(groups, []byte{1, t})
	}
	body := cat(vec(groups...), cat(code...), []byte{opEnd})
	return cat(u32(uint32(len(body))), body)
}

// Instructions with immediates.

func i32c(v int32) []byte     { return cat([]byte{opI32Const}, sleb(int64(v))) }
func i64c(v int64) []byte     { return cat([]byte{opI64Const}, sleb(v)) }
func lget(i uint32) []byte    { return cat([]byte{opLocalGet}, u32(i)) }
func lset(i uint32) []byte    { return cat([]byte{opLocalSet}, u32(i)) }
func ltee(i uint32) []byte    { return cat([]byte{opLocalTee}, u32(i)) }
func gget(i uint32) []byte    { return cat([]byte{opGlobalGet}, u32(i)) }
func gset(i uint32) []byte    { return cat([]byte{opGlobalSet}, u32(i)) }
func call(f uint32) []byte    { return cat([]byte{opCall}, u32(f)) }
func br(l uint32) []byte      { return cat([]byte{opBr}, u32(l)) }
func brIf(l uint32) []byte    { return cat([]byte{opBrIf}, u32(l)) }
func refFunc(f uint32) []byte { return cat([]byte{opRefFunc}, u32(f)) }
func callIndirect(typ, table uint32) []byte {
	return cat([]byte{opCallIndirect}, u32(typ), u32(table))
}

// inc adds one to local i.
func inc(i uint32) []byte { return cat(lget(i), i32c(1), ops(opI32Add), lset(i)) }

// Name section (https://webassembly.github.io/spec/core/appendix/custom.html).

type naming struct {
	idx  uint32
	name string
}

func nameMap(names ...naming) []byte {
	var items [][]byte
	for _, n := range names {
		items = append(items, cat(u32(n.idx), str(n.name)))
	}
	return vec(items...)
}

// indirect is one entry of an indirect name map: the names of the locals
// (or labels) of function fn.
type indirect struct {
	fn    uint32
	names []naming
}

func indirectNameMap(entries ...indirect) []byte {
	var items [][]byte
	for _, e := range entries {
		items = append(items, cat(u32(e.fn), nameMap(e.names...)))
	}
	return vec(items...)
}

func nameSubsection(id byte, body []byte) []byte {
	return cat([]byte{id}, u32(uint32(len(body))), body)
}

// TestMutableGlobalsExported: the defined mutable globals are exported
// under GlobalPrefix in order, readable and writable by the host (a
// snapshot's globals); imported globals and the countdown are not.
func TestMutableGlobalsExported(t *testing.T) {
	p := newPair(t, withImports())
	p.want(t, "run", u64s(1000+45), 10)
	g := p.inst.mod.ExportedGlobal(meter.GlobalPrefix + "0")
	if g == nil {
		t.Fatal("global 2 is not exported")
	}
	if got := g.Get(); got != 1010 {
		t.Fatalf("exported global = %d, want 1010 (count)", got)
	}
	mg, ok := g.(api.MutableGlobal)
	if !ok {
		t.Fatal("exported global is not mutable")
	}
	mg.Set(42)
	if res, err := p.inst.mod.ExportedFunction("count").Call(ctx); err != nil || res[0] != 42 {
		t.Fatalf("count after Set(42) = %v, %v", res, err)
	}
	if p.inst.mod.ExportedGlobal(meter.GlobalPrefix+"1") != nil {
		t.Fatal("an imported global or the countdown is exported")
	}

	// A module without an export section gets one.
	wasm := module(globalSec(global(tI32, false, i32c(3)), global(tI64, true, ops(0x42, 9)), global(tI32, true, i32c(4))))
	h := newHarness(t, 0)
	mod := h.load(t, instrument(t, wasm))
	for k, want := range []uint64{9, 4} {
		g := mod.ExportedGlobal(meter.GlobalPrefix + strconv.Itoa(k))
		if g == nil || g.Get() != want {
			t.Fatalf("global %d: %v, want %d", k, g, want)
		}
	}

	// A module may not use the reserved names itself.
	own := module(globalSec(global(tI32, true, i32c(1))), exportSec(export(meter.GlobalPrefix+"0", kGlobal, 0)))
	if _, err := meter.Instrument(own); !errors.Is(err, meter.ErrReservedExport) {
		t.Fatalf("Instrument of a module exporting %q0: %v, want ErrReservedExport", meter.GlobalPrefix, err)
	}
}

// TestOutsideState: code that changes a table or drops a segment is
// reported, since memory and globals are then not an instance's whole
// state; code that only reads them is not.
func TestOutsideState(t *testing.T) {
	for want, code := range map[string][]byte{
		"table.set":  ops(0x41, 0, 0xd0, 0x70, 0x26, 0),           // i32.const 0; ref.null func; table.set 0
		"table.grow": ops(0xd0, 0x70, 0x41, 1, 0xfc, 15, 0, 0x1a), // ref.null func; i32.const 1; table.grow 0; drop
		"":           ops(0x41, 0, 0x25, 0, 0x1a),                 // i32.const 0; table.get 0; drop
	} {
		wasm := module(typeSec(functype(nil, nil)), funcSec(0), tableSec(1), codeSec(fn(nil, code)))
		if _, err := newHarness(t, 0).rt.CompileModule(ctx, wasm); err != nil {
			t.Fatalf("%q: the test module is invalid: %v", want, err)
		}
		m, err := meter.InstrumentModule(wasm)
		if err != nil {
			t.Fatal(err)
		}
		if m.OutsideState != want {
			t.Errorf("OutsideState = %q, want %q", m.OutsideState, want)
		}
	}
}

// sectionSize is the size of a module's section with the given id (0 when
// it has none).
func sectionSize(t *testing.T, wasm []byte, id byte) int {
	t.Helper()
	r := &wasmbin.Reader{B: wasm, Off: 8}
	for r.Off < len(wasm) {
		sid, err := r.Byte()
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.U32()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Skip(int(n)); err != nil {
			t.Fatal(err)
		}
		if sid == id {
			return int(n)
		}
	}
	return 0
}
