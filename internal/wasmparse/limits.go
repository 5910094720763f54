package wasmparse

import (
	"errors"
	"fmt"
)

// Structural limits, checked before any engine compiles a module. They are
// the limits browsers hold every module to (V8's, wasm-limits.h; other
// engines' are the same or close), so a module any browser runs passes
// them; a module past them is refused before it can cost minutes of
// compilation. MaxBlockDepth is ours: the specification sets none, and an
// engine's compile time grows with the nesting (100,000 nested blocks took
// wazero over two minutes of CPU).
const (
	MaxTypes        = 1_000_000
	MaxFunctions    = 1_000_000 // imported and defined
	MaxImports      = 100_000
	MaxExports      = 100_000
	MaxGlobals      = 1_000_000
	MaxDataSegments = 100_000
	MaxElemSegments = 10_000_000
	MaxParams       = 1_000
	MaxResults      = 1_000
	// MaxFunctionSize bounds one function body, in bytes.
	MaxFunctionSize = 7_654_321
	// MaxLocals bounds the locals one function declares (its parameters
	// not counted).
	MaxLocals = 50_000
	// MaxBlockDepth bounds how deep blocks, loops, ifs and trys nest in one
	// function.
	MaxBlockDepth = 10_000
)

// ErrLimit is matched by every *LimitError.
var ErrLimit = errors.New("WebAssembly module over a structural limit")

// LimitError is returned when a module is over one of the structural
// limits. It matches ErrLimit and ErrMalformed is not it: the module may
// be valid WebAssembly, only too big to be compiled here.
type LimitError struct {
	// Limit names the limit: "types", "functions", "imports", "exports",
	// "globals", "data_segments", "element_segments", "params", "results",
	// "function_size", "locals", "block_depth".
	Limit string
	// Max is the limit and Got what the module has (for block_depth, the
	// first depth over the limit: scanning stops there).
	Max, Got uint64
	// Func is the index of the function over it among the defined
	// functions, or -1 when the limit is the module's.
	Func int
}

func (e *LimitError) Error() string {
	if e.Func >= 0 {
		return fmt.Sprintf("function %d: %s %d is over the limit of %d", e.Func, e.Limit, e.Got, e.Max)
	}
	return fmt.Sprintf("%s %d is over the limit of %d", e.Limit, e.Got, e.Max)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

func overLimit(limit string, got uint64, max uint64, fn int) error {
	if got <= max {
		return nil
	}
	return &LimitError{Limit: limit, Max: max, Got: got, Func: fn}
}
