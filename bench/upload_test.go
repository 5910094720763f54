package bench

import (
	"testing"

	"github.com/sandflow/sandflow/bench/workload"
)

// BenchmarkUploadToFirstCall is what a user waits for after uploading a Go
// guest: the upload pipeline (checks, compilation with an empty cache, the
// probe instantiation) and the first call of the tool, to its result:
// workload.UploadToFirstCall with examples/deploy on each engine.
func BenchmarkUploadToFirstCall(b *testing.B) {
	for _, name := range engineNames {
		b.Run(name, workload.UploadToFirstCall(workload.Runtime(name)))
	}
}
