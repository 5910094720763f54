package bench

import (
	"context"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmtest"
)

// wasiCalls is how many WASI calls one call of wasiModule's sandflow_run
// makes.
const wasiCalls = 10_000

// wasiModule is a guest whose sandflow_run calls clock_time_get (what a
// Go guest's time.Now and its scheduler call) wasiCalls times, counting in
// memory, and returns the count.
func wasiModule() []byte {
	i32 := wasmtest.I32Const
	var b []byte
	b = append(append(append(b, i32(1024)...), i32(0)...), 0x36, 0x02, 0x00) // count = 0
	b = append(b, 0x03, 0x40)                                                // loop
	b = append(append(b, i32(0)...), 0x42, 0x01)                             // clock 0, precision 1
	b = append(append(b, i32(16)...), 0x10, 0x00, 0x1a)                      // clock_time_get(0, 1, 16), drop the errno
	b = append(append(b, i32(1024)...), i32(1024)...)
	b = append(b, 0x28, 0x02, 0x00)
	b = append(append(b, i32(1)...), 0x6a, 0x36, 0x02, 0x00) // count++
	b = append(append(b, i32(1024)...), 0x28, 0x02, 0x00)
	b = append(append(b, i32(wasiCalls)...), 0x49, 0x0d, 0x00, 0x0b) // br_if count < wasiCalls, end
	b = append(append(b, i32(1024)...), 0x28, 0x02, 0x00)
	clock := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "clock_time_get",
		Params: []byte{wasmtest.I32, wasmtest.I64, wasmtest.I32}, Results: []byte{wasmtest.I32}}
	return wasmtest.Guest(b, clock)
}

// BenchmarkWASIClockTimeGet times one WASI call from guest code to the host's
// WASI and back (ns/call): clock_time_get, which writes the instance's
// clock into guest memory.
func BenchmarkWASIClockTimeGet(b *testing.B) {
	ctx := context.Background()
	wasm := wasiModule()
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			cm := compile(b, sharedEngine(b, name), wasm)
			defer cm.Close(ctx)
			inst := instantiate(b, cm)
			defer inst.Close(ctx)
			for b.Loop() {
				if n, err := inst.Call(ctx, "sandflow_run"); err != nil || n != wasiCalls {
					b.Fatal(n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*wasiCalls), "ns/call")
		})
	}
}
