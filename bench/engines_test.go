package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/bench/workload"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/internal/wasmbin"
)

// The guest constant of testdata/guests/benchguest.
const spinIterations = 50_000_000

const (
	kitchenDir    = "host/testdata/guests/kitchen"
	benchGuestDir = "bench/testdata/guests/benchguest"
)

var engineNames = []string{host.EngineWazero, host.EngineWasmtime}

var cacheRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandflow-bench-")
	if err != nil {
		panic(err)
	}
	cacheRoot = dir
	code := m.Run()
	workload.Cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

func repoFile(b *testing.B, rel string) string {
	root, err := guestbuild.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// module builds a guest from source.
func module(b *testing.B, dir string) []byte {
	b.Helper()
	wasm, err := os.ReadFile(mustBuild(b, repoFile(b, dir)))
	if err != nil {
		b.Fatal(err)
	}
	return wasm
}

func mustBuild(b *testing.B, dir string) string {
	p, err := guestbuild.Build(dir)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// newEngine makes an engine, or skips when this build does not have it.
func newEngine(b *testing.B, name, cacheDir string) host.Engine {
	b.Helper()
	e, err := host.NewEngine(context.Background(), name, cacheDir)
	if err != nil {
		if name == host.EngineWasmtime {
			b.Skip(err)
		}
		b.Fatal(err)
	}
	return e
}

// sharedEngine is one engine per name for the benchmarks that do not time
// compilation: bench/workload's, with a cache directory so each module
// compiles once.
func sharedEngine(b *testing.B, name string) host.Engine {
	e, err := workload.Engine(name)
	if err != nil {
		if errors.Is(err, workload.ErrUnavailable) {
			b.Skip(err)
		}
		b.Fatal(err)
	}
	return e
}

func compile(b *testing.B, e host.Engine, wasm []byte) host.CompiledModule {
	b.Helper()
	cm, err := e.Compile(context.Background(), wasm)
	if err != nil {
		b.Fatal(err)
	}
	return cm
}

type clock struct{ now int64 }

func (c *clock) Now() int64     { return c.now }
func (c *clock) Sleep(ns int64) { c.now += max(ns, 1) }

// okOps answers every op with the same 8-byte ok body.
type okOps struct{ body []byte }

func (o *okOps) Op(context.Context, abi.OpKind, []byte, []byte) ([]byte, error) { return o.body, nil }

func config() host.InstanceConfig {
	return host.InstanceConfig{
		Clock: &clock{now: time.Now().UnixNano()}, Random: rand.Reader, Stdout: io.Discard, Stderr: io.Discard,
		MemoryLimit: host.DefaultLimits.MemoryBytes, CPULimit: time.Minute, Ops: &okOps{body: make([]byte, 8)},
	}
}

func instantiate(b *testing.B, cm host.CompiledModule) host.Instance {
	b.Helper()
	inst, err := cm.Instantiate(context.Background(), config())
	if err != nil {
		b.Fatal(err)
	}
	return inst
}

// BenchmarkCompile compiles the kitchen guest with no cache.
func BenchmarkCompile(b *testing.B) {
	wasm := module(b, kitchenDir)
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			e := newEngine(b, name, "")
			defer e.Close(context.Background())
			b.SetBytes(int64(len(wasm)))
			for b.Loop() {
				compile(b, e, wasm).Close(context.Background())
			}
		})
	}
}

// BenchmarkCachedReload compiles the kitchen guest in a new engine (a new
// process, say) whose cache directory already holds it.
func BenchmarkCachedReload(b *testing.B) {
	wasm := module(b, kitchenDir)
	ctx := context.Background()
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(cacheRoot, "reload", name)
			e := newEngine(b, name, dir)
			compile(b, e, wasm).Close(ctx)
			e.Close(ctx)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				e := newEngine(b, name, dir)
				b.StartTimer()
				cm := compile(b, e, wasm)
				b.StopTimer()
				cm.Close(ctx)
				e.Close(ctx)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkInstantiate makes an instance of the kitchen guest, running its
// _initialize (the Go runtime's start), and closes it.
func BenchmarkInstantiate(b *testing.B) {
	wasm := module(b, kitchenDir)
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			cm := compile(b, sharedEngine(b, name), wasm)
			defer cm.Close(context.Background())
			for b.Loop() {
				instantiate(b, cm).Close(context.Background())
			}
		})
	}
}

// BenchmarkOpRoundTrip times one sandflow.op call from guest code to an
// OpHandler and back (ns/roundtrip): workload.OpRoundTrip, on the
// benchmark guest's bench_ops, which issues 10,000 ops per call.
func BenchmarkOpRoundTrip(b *testing.B) {
	for _, name := range engineNames {
		b.Run(name, workload.OpRoundTrip(workload.Runtime(name)))
	}
}

// BenchmarkReplay1000Steps times a host.ReplayChecker's check of the history of a
// completed 1,000-step run: workload.Replay with the Go guest on each
// engine.
func BenchmarkReplay1000Steps(b *testing.B) {
	for _, name := range engineNames {
		b.Run(name, workload.Replay(workload.Runtime(name), 1000))
	}
}

// BenchmarkCPULoop times a loop of arithmetic in Go guest code
// (bench_spin) with the CPU limit on, in ns/iteration: wazero counts down
// at every loop iteration (internal/meter), wasmtime checks an epoch.
func BenchmarkCPULoop(b *testing.B) {
	wasm := module(b, benchGuestDir)
	benchSpin(b, wasm, "bench_spin")
}

// BenchmarkCPULoopRaw is BenchmarkCPULoop on a hand-assembled loop with
// its counters in locals: the loop as tight as WebAssembly allows, so the
// metering cost shows most.
func BenchmarkCPULoopRaw(b *testing.B) {
	benchSpin(b, spinModule(spinIterations), "spin")
}

func benchSpin(b *testing.B, wasm []byte, export string) {
	ctx := context.Background()
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			cm := compile(b, sharedEngine(b, name), wasm)
			defer cm.Close(ctx)
			inst := instantiate(b, cm)
			defer inst.Close(ctx)
			want := spinResult(spinIterations)
			for b.Loop() {
				if n, err := inst.Call(ctx, export); err != nil || n != want {
					b.Fatal(n, want, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spinIterations), "ns/iter")
		})
	}
}

// spinResult is what both loops return.
func spinResult(n uint32) int32 {
	var acc uint32
	for i := uint32(0); i < n; i++ {
		acc = acc*31 + i
	}
	return int32(acc)
}

// spinModule is a module exporting spin: () -> i32, which computes
// spinResult(n) with i and acc in locals:
//
//	loop
//	  acc = acc*31 + i; i++ ... (as bench_spin: acc*31 + i, then i+1)
//	  br_if i < n
//	end
//	acc
func spinModule(n uint32) []byte {
	code := []byte{0x01, 0x02, 0x7f} // locals: 2 x i32 (0 = i, 1 = acc)
	code = append(code, 0x03, 0x40)  // loop
	// acc = acc*31 + i
	code = append(code, 0x20, 0x01, 0x41, 0x1f, 0x6c, 0x20, 0x00, 0x6a, 0x21, 0x01)
	// i = i + 1
	code = append(code, 0x20, 0x00, 0x41, 0x01, 0x6a, 0x21, 0x00)
	// br_if 0 (i <u n)
	code = append(code, 0x20, 0x00, 0x41)
	code = wasmbin.AppendSLEB(code, int64(int32(n)))
	code = append(code, 0x49, 0x0d, 0x00)
	code = append(code, 0x0b, 0x20, 0x01, 0x0b) // end loop, acc, end
	body := append([]byte{byte(len(code))}, code...)

	var m []byte
	m = append(m, "\x00asm\x01\x00\x00\x00"...)
	m = append(m, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f)               // type: () -> i32
	m = append(m, 0x03, 0x02, 0x01, 0x00)                                 // func 0: type 0
	m = append(m, 0x07, 0x08, 0x01, 0x04, 's', 'p', 'i', 'n', 0x00, 0x00) // export "spin"
	m = append(m, 0x0a, byte(len(body)+1), 0x01)                          // code: one body
	return append(m, body...)
}
