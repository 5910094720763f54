package jsprogram_test

import (
	"context"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/jsprogram"
)

// The engines' conformance suite, the cases that need no guest code of the
// engine's language (its other cases are hand-assembled WebAssembly), on
// the workflow tool's configuration as the module.
func TestConformance(t *testing.T) {
	e, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	enginetest.Suite{
		Engine:  func(testing.TB) engine.Engine { return e },
		Module:  []byte(`{"sandflow": "workflow-tool"}`),
		Version: abi.Version,
	}.Run(t)
}
