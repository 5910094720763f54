package host_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/store"
)

// sharedEngine is one wazero engine for the whole test binary, so each
// guest compiles once.
func sharedEngine(t testing.TB) host.Engine { return testhost.Wazero(t) }

// testEngine is an engine the kernel behaviour tests run on.
type testEngine struct {
	name string
	get  func(t testing.TB) host.Engine
}

// testEngines lists the engines every kernel behaviour runs on (the
// conformance suite); an engine compiled in only with cgo adds itself from
// an init function in a file with that build tag.
var testEngines = []testEngine{{"wazero", sharedEngine}}

var (
	engineMu sync.Mutex
	engineOf = map[string]host.Engine{} // by test name
)

// eachEngine runs fn as a subtest on every test engine; fixtures made in
// it (and in its subtests) use that engine.
func eachEngine(t *testing.T, fn func(t *testing.T)) {
	for _, e := range testEngines {
		t.Run(e.name, func(t *testing.T) {
			eng := e.get(t)
			engineMu.Lock()
			engineOf[t.Name()] = eng
			engineMu.Unlock()
			t.Cleanup(func() {
				engineMu.Lock()
				delete(engineOf, t.Name())
				engineMu.Unlock()
			})
			fn(t)
		})
	}
}

// engineFor returns the engine of the eachEngine subtest t runs in, or
// wazero outside one.
func engineFor(t testing.TB) host.Engine {
	engineMu.Lock()
	defer engineMu.Unlock()
	best, eng := -1, host.Engine(nil)
	for name, e := range engineOf {
		if (t.Name() == name || strings.HasPrefix(t.Name(), name+"/")) && len(name) > best {
			best, eng = len(name), e
		}
	}
	if eng != nil {
		return eng
	}
	return sharedEngine(t)
}

func repo(t testing.TB) string { return testhost.RepoRoot(t) }

// guest builds a guest from source (relative to the repository root).
func guest(t testing.TB, dir string) []byte {
	t.Helper()
	return testhost.Guest(t, dir)
}

// manifest reads a guest's manifest.json (dir relative to the repository
// root).
func manifest(t testing.TB, dir string) host.Manifest {
	t.Helper()
	return testhost.Manifest(t, dir)
}

type fixture struct {
	t    testing.TB
	dir  string
	st   *store.Bolt
	h    *host.Host
	opts host.Options
}

// newFixture opens a host on a fresh store in a temp dir.
func newFixture(t testing.TB, opts *host.Options) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir()}
	if opts != nil {
		f.opts = *opts
	}
	f.opts.Engine = engineFor(t)
	f.open()
	t.Cleanup(func() { f.close() })
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	st, err := store.Open(filepath.Join(f.dir, "sandflow.db"), &store.Options{NoSync: true})
	if err != nil {
		f.t.Fatal(err)
	}
	h, err := host.Open(context.Background(), st, &f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.st, f.h = st, h
}

func (f *fixture) close() {
	if f.h != nil {
		f.h.Close(context.Background())
		f.st.Close()
		f.h, f.st = nil, nil
	}
}

// restart closes the host and store and opens them again, as a new process
// would: nothing in memory survives.
func (f *fixture) restart() {
	f.close()
	f.open()
}

func (f *fixture) add(dir string) host.Plugin {
	f.t.Helper()
	p, err := f.h.AddPlugin(context.Background(), guest(f.t, dir), manifest(f.t, dir))
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) call(tool, input string) host.RunInfo {
	f.t.Helper()
	ri, err := f.h.Call(context.Background(), tool, json.RawMessage(input), nil)
	if err != nil {
		f.t.Fatalf("call %s: %v", tool, err)
	}
	return ri
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
