package sandflow

import (
	"encoding/json"
	"iter"
	"reflect"
	"runtime"
	"runtime/debug"
)

// What the guest does while it initialises so that runs start fast. The
// host starts every run on an instance in the state _initialize left (a
// new one, or a finished run's instance reset to that state: see
// host/recycle.go), so anything a run would otherwise build for itself
// on its first use (free heap, a grown goroutine stack, encoding/json's
// per-type caches) is built once here and is there at the start of every
// run.

// heapReserve is how much free heap the initialised image holds. A Go
// guest's linear memory grows as its heap does, and memory never shrinks;
// the host reuses an instance only if its memory is still the size it had
// after initialisation. With this much heap allocated and collected here,
// a run that allocates less before its first collection does not grow its
// memory. The pages stay untouched until the heap uses them.
const heapReserve = 2 << 20

// bodyStack is about how much stack the workflow body's goroutine has
// grown to before a run begins: decoding JSON by reflection needs tens of
// KiB, and growing a goroutine's stack copies it.
const bodyStack = 100 << 10

func init() {
	runtime.KeepAlive(make([]byte, heapReserve))
	// Collected now, and its pages scavenged, so that no run does it.
	debug.FreeOSMemory()
}

// prepare makes the body's coroutine, grows its stack, and primes the
// allocator: sandflow_prepare, which the host calls once after
// _initialize, after every init function has run (the collection above
// included, which would shrink an idle goroutine's stack). A coroutine
// cannot be made in init: init runs with the runtime's init-time thread
// lock, and a coroutine made under it can be switched to only under it,
// which sandflow_run is not. A host that does not call sandflow_prepare
// gets it from the first sandflow_run.
func prepare() {
	if bodyNext != nil {
		return
	}
	bodyNext, _ = iter.Pull(func(yield func(int32) bool) {
		bodyYield = yield
		growStack(bodyStack / 1024)
		yield(0) // grown: wait for the first sandflow_run
		body()
	})
	bodyNext()
	primeAllocator()
}

// primeSmall is the largest object size primeAllocator allocates: a span
// of a larger size class holds only a few objects, so a cached one helps
// little.
const primeSmall = 2048

// primeSink keeps the priming allocations from being optimised away.
var primeSink []byte

// primeScanSink is primeSink for objects that hold pointers.
var primeScanSink []*byte

// primeAllocator allocates an object of each small size class, with and
// without pointers, and drops it. Go's allocator then holds a span with
// free slots for each of those size classes, and the image keeps them:
// without this, the first object of each size class a run allocates takes
// a new span from the heap, every run, since every run starts from the
// image (a few µs each in WebAssembly, tens of µs for a trivial call).
// Go's size classes are at least 8 bytes and at least a sixteenth of their
// size apart, so stepping by the larger of the two reaches each of them,
// with about 60 sizes rather than every multiple of 8 (whose zeroing made
// preparing an instance about 0.5 ms slower).
func primeAllocator() {
	for n := 8; n <= primeSmall; n += max(8, n/16) {
		primeSink = make([]byte, n)
		primeScanSink = make([]*byte, (n+7)/8)
	}
	primeSink, primeScanSink = nil, nil
}

var stackSink byte

// growStack uses about depth KiB of stack.
//
//go:noinline
func growStack(depth int) {
	var pad [1000]byte
	pad[depth%len(pad)] = byte(depth)
	if depth > 1 {
		growStack(depth - 1)
	}
	stackSink += pad[(depth*7)%len(pad)]
}

// Warm builds, while the guest initialises, what encoding or decoding a
// T needs on first use (the SDK's plan of a plain struct, encoding/json's
// per-type caches), so that it is in the state every run starts from
// rather than built by every run. The SDK warms the types of the entry
// point and of the steps; call Warm from an init function for the others
// a run encodes or decodes: a result returned as any, say.
func Warm[T any]() { warmCodec[T]() }

// warmCodec runs encoding/json over a zero T, encoding it and decoding the
// result, so that the package's per-type caches (field lists, encoders)
// are built while the guest initialises instead of on every run's first
// value of the type. The SDK warms the types of the entry point and of the
// steps it is given; a tool warms any others it encodes (values returned
// as any, say) in its own init. A type whose methods fail or panic on its
// zero value is left to build its caches when used.
func warmCodec[T any]() {
	defer func() { _ = recover() }()
	planOf(reflect.TypeFor[T]())
	var v T
	b, err := json.Marshal(&v)
	if err != nil {
		return
	}
	var w T
	_ = json.Unmarshal(b, &w)
}
