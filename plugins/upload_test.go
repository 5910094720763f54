package plugins_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/plugins"
)

const (
	goodManifest = `{"name":"tool","entry":"execute","inputSchema":{"type":"object"}}`
	script       = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, async execute() { return 1 } });`
	config       = `{"sandflow":"workflow-tool","maxSubagents":8}`
)

// manifestOf is an Upload.Manifest that returns raw and counts its calls.
func manifestOf(raw string, calls *int) func() ([]byte, error) {
	return func() ([]byte, error) {
		*calls++
		return []byte(raw), nil
	}
}

func TestClassify(t *testing.T) {
	wasm := wasmtest.Guest(wasmtest.ReturnOne)
	wasmScript := "\x00asm" + script // a script whose bytes start with the wasm magic
	errRead := errors.New("manifest unreadable")
	for _, tc := range []struct {
		name string
		u    plugins.Upload
		// manifest, when not empty, is the manifest that came; "-" is one
		// whose reading fails with errRead.
		manifest string
		kind     plugins.Kind
		// wantName is the decided tool name, for KindScript.
		wantName string
		problem  plugins.Problem
		is       error
		// reads is how often the manifest may be read: 1 when the
		// decision needs it, 0 when it must not be read.
		reads int
	}{
		// A form: the bytes alone decide.
		{name: "wasm with manifest", u: plugins.Upload{Module: wasm}, manifest: goodManifest, kind: plugins.KindWasm, reads: 1},
		{name: "wasm without manifest", u: plugins.Upload{Module: wasm}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "wasm with name but no manifest", u: plugins.Upload{Module: wasm, Name: "x"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "wasm with bad manifest", u: plugins.Upload{Module: wasm}, manifest: `{"name":"tool"}`, is: plugins.ErrBadManifest, reads: 1},
		{name: "wasm with empty manifest", u: plugins.Upload{Module: wasm}, manifest: " ", is: plugins.ErrBadManifest, reads: 1},
		{name: "manifest unreadable", u: plugins.Upload{Module: wasm}, manifest: "-", is: errRead, reads: 1},
		{name: "script named", u: plugins.Upload{Module: []byte(script), Name: "deploy"}, kind: plugins.KindScript, wantName: "deploy"},
		{name: "script unnamed", u: plugins.Upload{Module: []byte(script)}, problem: plugins.ProblemNoName, is: plugins.ErrBadManifest},
		{name: "script with manifest", u: plugins.Upload{Module: []byte(script)}, manifest: goodManifest, kind: plugins.KindProgram, reads: 1},
		{name: "config without manifest", u: plugins.Upload{Module: []byte(config), Name: "w"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "config with manifest", u: plugins.Upload{Module: []byte(config)}, manifest: goodManifest, kind: plugins.KindProgram, reads: 1},
		// Hostile bytes: nothing here looks further than the header; the
		// engine refuses what does not run.
		{name: "empty module named", u: plugins.Upload{Name: "x"}, kind: plugins.KindScript, wantName: "x"},
		{name: "empty module unnamed", u: plugins.Upload{}, problem: plugins.ProblemNoName, is: plugins.ErrBadManifest},
		{name: "truncated wasm header", u: plugins.Upload{Module: []byte("\x00as"), Name: "x"}, kind: plugins.KindScript, wantName: "x"},
		{name: "script behind the wasm magic", u: plugins.Upload{Module: []byte(wasmScript), Name: "x"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "script behind the wasm magic with manifest", u: plugins.Upload{Module: []byte(wasmScript)}, manifest: goodManifest, kind: plugins.KindWasm, reads: 1},

		// A file by name: its extension speaks first.
		{name: "file wasm with manifest", u: plugins.Upload{Module: wasm, Path: "dir/tool.wasm"}, manifest: goodManifest, kind: plugins.KindWasm, reads: 1},
		{name: "file wasm without manifest", u: plugins.Upload{Module: wasm, Path: "tool.wasm"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "file wasm with manifest and name", u: plugins.Upload{Module: wasm, Path: "tool.wasm", Name: "x"}, manifest: goodManifest, problem: plugins.ProblemNameForModule, is: plugins.ErrBadManifest},
		{name: "file wasm with unreadable manifest", u: plugins.Upload{Module: wasm, Path: "tool.wasm"}, manifest: "-", is: errRead, reads: 1},
		{name: "file js named after itself", u: plugins.Upload{Module: []byte(script), Path: "dir/deploy.js"}, kind: plugins.KindScript, wantName: "deploy"},
		{name: "file mjs named by Name", u: plugins.Upload{Module: []byte(script), Path: "deploy.mjs", Name: "other"}, kind: plugins.KindScript, wantName: "other"},
		{name: "file JS in capitals", u: plugins.Upload{Module: []byte(script), Path: "DEPLOY.JS"}, kind: plugins.KindScript, wantName: "DEPLOY"},
		{name: "file js with manifest", u: plugins.Upload{Module: []byte(script), Path: "deploy.js"}, manifest: "-", problem: plugins.ProblemManifestForScript, is: plugins.ErrBadManifest},
		{name: "file js holding a config", u: plugins.Upload{Module: []byte(config), Path: "w.js"}, kind: plugins.KindScript, wantName: "w"},
		{name: "file js behind the wasm magic", u: plugins.Upload{Module: []byte(wasmScript), Path: "deploy.js"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
		{name: "file neither", u: plugins.Upload{Module: []byte(script), Path: "README.md"}, manifest: "-", problem: plugins.ProblemNotPluginFile, is: plugins.ErrBadPlugin},
		{name: "file empty", u: plugins.Upload{Path: "empty.wasm"}, problem: plugins.ProblemNotPluginFile, is: plugins.ErrBadPlugin},
		{name: "file truncated wasm header", u: plugins.Upload{Module: []byte("\x00as"), Path: "tool.wasm"}, manifest: "-", problem: plugins.ProblemNotPluginFile, is: plugins.ErrBadPlugin},
		{name: "file config with manifest", u: plugins.Upload{Module: []byte(config), Path: "w.json"}, manifest: goodManifest, kind: plugins.KindProgram, reads: 1},
		{name: "file config without manifest", u: plugins.Upload{Module: []byte(config), Path: "w.json"}, problem: plugins.ProblemNoManifest, is: plugins.ErrBadManifest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			u := tc.u
			switch tc.manifest {
			case "":
			case "-":
				u.Manifest = func() ([]byte, error) { calls++; return nil, errRead }
			default:
				u.Manifest = manifestOf(tc.manifest, &calls)
			}
			d, err := plugins.Classify(u)
			if calls != tc.reads {
				t.Errorf("the manifest was read %d times, want %d", calls, tc.reads)
			}
			var ue *plugins.UploadError
			if got := errors.As(err, &ue); got != (tc.problem != "") || (got && ue.Problem != tc.problem) {
				t.Fatalf("Classify: %v; want problem %q", err, tc.problem)
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Fatalf("Classify: %v; want an error matching %v", err, tc.is)
				}
				if d.Kind != 0 {
					t.Errorf("a refused upload was decided to be %s", d.Kind)
				}
				return
			}
			if err != nil {
				t.Fatalf("Classify: %v", err)
			}
			if d.Kind != tc.kind || d.Name != tc.wantName || string(d.Module) != string(u.Module) {
				t.Errorf("got %s named %q; want %s named %q", d.Kind, d.Name, tc.kind, tc.wantName)
			}
			if (d.Kind == plugins.KindScript) != (d.Manifest.Name == "") {
				t.Errorf("%s with manifest %+v", d.Kind, d.Manifest)
			}
		})
	}
}

// TestClassifyErrorNamesTheFile: the refusal of a file that is no plugin
// says which file, as the CLI has always printed it.
func TestClassifyErrorNamesTheFile(t *testing.T) {
	_, err := plugins.Classify(plugins.Upload{Module: []byte("# notes"), Path: "docs/README.md"})
	var ue *plugins.UploadError
	if !errors.As(err, &ue) || ue.Path != "docs/README.md" {
		t.Fatalf("got %v, want an *UploadError for docs/README.md", err)
	}
	if want := "plugin refused: docs/README.md is neither a WebAssembly module"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start %q", err, want)
	}
}

// TestClassifyManifestFromAFile: a manifest read lazily from a file that
// is missing fails with the file's error, matched as os.ErrNotExist.
func TestClassifyManifestFromAFile(t *testing.T) {
	path := t.TempDir() + "/missing.json"
	_, err := plugins.Classify(plugins.Upload{Module: wasmtest.Guest(wasmtest.ReturnOne), Path: "tool.wasm",
		Manifest: func() ([]byte, error) { return os.ReadFile(path) }})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want os.ErrNotExist", err)
	}
}

func TestIsScript(t *testing.T) {
	for _, tc := range []struct {
		name   string
		module string
		script bool
	}{
		{"script", script, true},
		{"wasm", string(wasmtest.Guest(wasmtest.ReturnOne)), false},
		{"wasm magic alone", "\x00asm", false},
		{"script behind the wasm magic", "\x00asm" + script, false},
		{"truncated wasm header", "\x00as", true},
		{"empty", "", true},
		{"workflow tool config", config, false},
		{"config of an unknown kind", `{"sandflow":"other"}`, false},
		{"config with empty kind", `{"sandflow":""}`, true},
		{"config whose kind is not a string", `{"sandflow":5}`, true},
		{"config with a bad budget", `{"sandflow":"workflow-tool","maxSubagents":"x"}`, true},
		{"JSON that is no config", `{"name":"x"}`, true},
		{"JSON array", `[1]`, true},
		{"not UTF-8", "\xff\xfe", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := plugins.IsScript([]byte(tc.module)); got != tc.script {
				t.Errorf("IsScript = %v, want %v", got, tc.script)
			}
		})
	}
}

func TestParseWorkflowToolConfig(t *testing.T) {
	c, ok := plugins.ParseWorkflowToolConfig([]byte(config))
	if !ok || c.Sandflow != "workflow-tool" || c.MaxSubagents == nil || *c.MaxSubagents != 8 {
		t.Fatalf("got %+v, %v", c, ok)
	}
	if c, ok := plugins.ParseWorkflowToolConfig([]byte(script)); ok || c.Sandflow != "" || c.MaxSubagents != nil {
		t.Fatalf("a script read as a config: %+v", c)
	}
}
