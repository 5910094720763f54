package plugins_test

import (
	"errors"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/plugins"
)

// FuzzClassify: Classify never panics, and its decision agrees with the
// header and IsScript: WebAssembly needs a manifest, a script without one
// is a script, and every refusal is typed.
func FuzzClassify(f *testing.F) {
	f.Add(wasmtest.Guest(wasmtest.ReturnOne), goodManifest, "", "")
	f.Add([]byte(script), "", "deploy", "")
	f.Add([]byte(script), "", "", "deploy.js")
	f.Add([]byte(config), goodManifest, "", "w.json")
	f.Add([]byte("\x00asm"+script), "", "x", "x.js")
	f.Add([]byte{}, "", "", "README.md")
	f.Add([]byte(script), "", "", ".js") // named "" after the file: the manifest check refuses it later
	f.Fuzz(func(t *testing.T, module []byte, manifest, name, path string) {
		u := plugins.Upload{Module: module, Name: name, Path: path}
		if manifest != "" {
			u.Manifest = func() ([]byte, error) { return []byte(manifest), nil }
		}
		d, err := plugins.Classify(u)
		if err != nil {
			var ue *plugins.UploadError
			if !errors.As(err, &ue) && !errors.Is(err, plugins.ErrBadManifest) {
				t.Fatalf("untyped refusal: %v", err)
			}
			return
		}
		switch d.Kind {
		case plugins.KindWasm:
			if !plugins.IsWasm(module) || manifest == "" {
				t.Fatalf("wasm without the header or a manifest")
			}
		case plugins.KindScript:
			if plugins.IsWasm(module) || manifest != "" || (d.Name == "" && path == "") {
				t.Fatalf("script decision for wasm, with a manifest, or unnamed: %+v", d)
			}
		case plugins.KindProgram:
			if plugins.IsWasm(module) || manifest == "" {
				t.Fatalf("program decision for wasm or without a manifest")
			}
		default:
			t.Fatalf("no kind decided: %+v", d)
		}
	})
}
