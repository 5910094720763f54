package plugins_test

import (
	"errors"
	"fmt"

	"github.com/sandflow/sandflow/plugins"
)

// A surface hands Classify what it received and words each problem its own
// way; the decision says how to register the upload.
func ExampleClassify() {
	manifest := func() ([]byte, error) {
		return []byte(`{"name":"deploy","entry":"task","inputSchema":{"type":"object"}}`), nil
	}
	for _, u := range []plugins.Upload{
		{Module: []byte("\x00asm\x01\x00\x00\x00"), Manifest: manifest},
		{Module: []byte(`defineWorkflowTool({ /* ... */ })`), Name: "deploy"},
		{Module: []byte(`defineWorkflowTool({ /* ... */ })`)},
		{Module: []byte(`defineWorkflowTool({ /* ... */ })`), Path: "tools/deploy.js"},
		{Module: []byte("\x00asm\x01\x00\x00\x00"), Path: "deploy.wasm"},
	} {
		d, err := plugins.Classify(u)
		var ue *plugins.UploadError
		switch {
		case errors.As(err, &ue):
			fmt.Println("refused:", ue.Problem)
		case err != nil:
			fmt.Println("refused:", err)
		default:
			fmt.Println(d.Kind, d.Name+d.Manifest.Name)
		}
	}
	// Output:
	// wasm deploy
	// script deploy
	// refused: no_name
	// script deploy
	// refused: no_manifest
}
