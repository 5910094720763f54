// Package testhost is the fixture the tests of several packages share: a
// host on a store in a temporary directory with both engines (the shared
// wazero engine for WebAssembly and goja for JavaScript), guests built from
// source, helpers that run a tool, and an HTTP server that closes with the
// test.
//
// It is for tests only: nothing but _test.go files imports it. It imports
// host and jsprogram, so the tests that use it are external test packages
// (host_test, jsprogram_test, ...); a package's internal tests keep what
// they need in their own files.
//
// A test binary that opens a Host must start with Main, since JavaScript
// tools run in worker processes that re-execute the test binary.
package testhost

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/jsprogram"
)

// Main is a test binary's TestMain: in a JavaScript worker process it runs
// the worker, otherwise the tests.
func Main(m *testing.M) {
	jsprogram.MaybeWorker()
	os.Exit(m.Run())
}

var (
	wazeroOnce sync.Once
	wazero     host.Engine
	wazeroErr  error
)

// Wazero is one wazero engine for the whole test binary, so that each guest
// compiles once. Hosts given it do not close it.
func Wazero(t testing.TB) host.Engine {
	wazeroOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandflow-test-cache-")
		if err != nil {
			wazeroErr = err
			return
		}
		wazero, wazeroErr = host.NewWazeroEngine(context.Background(), dir)
	})
	if wazeroErr != nil {
		t.Fatal(wazeroErr)
	}
	return wazero
}

// RepoRoot is the repository's root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Guest builds the Go guest in dir (relative to the repository root) and
// returns its module.
func Guest(t testing.TB, dir string) []byte {
	t.Helper()
	p, err := guestbuild.Build(filepath.Join(RepoRoot(t), dir))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Manifest reads and parses dir/manifest.json (dir relative to the
// repository root).
func Manifest(t testing.TB, dir string) host.Manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(t), dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := host.ParseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Options configure a Host; nil means defaults.
type Options struct {
	// Host are the host's options. The JavaScript engine is added to
	// Engines; Engine, when nil, is the shared wazero engine.
	Host host.Options
	// JS are the JavaScript engine's options.
	JS jsprogram.Options
}

// Host is a host on a store in a temporary directory, with both engines.
// Restart replaces H and JS, and nothing else of the host survives it;
// after Close, JS is the closed engine (its Stats still answer).
type Host struct {
	T   testing.TB
	Dir string // the test's directory; the host's data is in Dir/data
	H   *host.Host
	JS  *jsprogram.Engine

	opts Options
}

// New opens a Host in a new temporary directory; it closes when the test
// ends.
func New(t testing.TB, opts *Options) *Host {
	t.Helper()
	h := &Host{T: t, Dir: t.TempDir()}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Host.Engine == nil {
		h.opts.Host.Engine = Wazero(t)
	}
	h.Open()
	t.Cleanup(h.Close)
	return h
}

// Open opens the host on Dir/data, as a new process would.
func (h *Host) Open() {
	h.T.Helper()
	o := h.opts.JS
	js, err := jsprogram.NewEngine(&o)
	if err != nil {
		h.T.Fatal(err)
	}
	ho := h.opts.Host
	ho.Engines = map[string]host.Engine{jsprogram.EngineName: js}
	for name, e := range h.opts.Host.Engines {
		ho.Engines[name] = e
	}
	hh, err := host.OpenDir(context.Background(), filepath.Join(h.Dir, "data"), &ho)
	if err != nil {
		js.Close(context.Background())
		h.T.Fatal(err)
	}
	h.H, h.JS = hh, js
}

// Close closes the host and the JavaScript engine; it does nothing when
// the host is closed.
func (h *Host) Close() {
	if h.H != nil {
		h.H.Close(context.Background())
		h.JS.Close(context.Background())
		h.H = nil
	}
}

// Restart closes the host and opens it again on the same data: nothing in
// memory survives.
func (h *Host) Restart() {
	h.T.Helper()
	h.Close()
	h.Open()
}

// Recover recovers the runs that were working, as a host's process does
// when it starts.
func (h *Host) Recover() {
	h.T.Helper()
	if err := h.H.Recover(context.Background(), nil); err != nil {
		h.T.Fatal(err)
	}
}

// AddJS registers a JavaScript tool.
func (h *Host) AddJS(name, src string) host.Plugin {
	h.T.Helper()
	p, err := jsprogram.RegisterTool(context.Background(), h.H, name, []byte(src))
	if err != nil {
		h.T.Fatalf("registering %s: %v", name, err)
	}
	return p
}

// AddExample registers the example script examples/js/NAME.js as tool
// name.
func (h *Host) AddExample(name string) host.Plugin {
	h.T.Helper()
	src, err := os.ReadFile(filepath.Join(RepoRoot(h.T), "examples", "js", name+".js"))
	if err != nil {
		h.T.Fatal(err)
	}
	return h.AddJS(name, string(src))
}

// Call calls a tool and returns when its run ends or waits.
func (h *Host) Call(tool, input string) host.RunInfo {
	h.T.Helper()
	ri, err := h.H.Call(context.Background(), tool, json.RawMessage(input), nil)
	if err != nil {
		h.T.Fatalf("calling %s: %v", tool, err)
	}
	return ri
}

// Drive starts a run of a tool and drives it until it ends or waits.
func (h *Host) Drive(tool, input string) host.RunInfo {
	h.T.Helper()
	ctx := context.Background()
	ri, err := h.H.Start(ctx, tool, json.RawMessage(input), nil)
	if err != nil {
		h.T.Fatalf("starting %s: %v", tool, err)
	}
	if ri, err = h.H.Drive(ctx, ri.ID); err != nil {
		h.T.Fatalf("driving %s: %v", tool, err)
	}
	return ri
}

// Program runs a program of the workflow tool (which must be registered)
// until it ends or waits.
func (h *Host) Program(js string) host.RunInfo {
	h.T.Helper()
	in, err := json.Marshal(map[string]string{"js": js})
	if err != nil {
		h.T.Fatal(err)
	}
	return h.Drive(jsprogram.WorkflowToolName, string(in))
}

// WaitUntil polls cond until it holds, and fails the test when it does not
// within 30 seconds.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Server is an HTTP test server; Close closes its client connections
// first, so that streams held open do not keep it waiting, and may be
// called more than once.
type Server struct {
	*httptest.Server
	once sync.Once
}

// Serve starts a server for handler that closes when the test ends.
func Serve(t testing.TB, handler http.Handler) *Server {
	s := &Server{Server: httptest.NewServer(handler)}
	t.Cleanup(s.Close)
	return s
}

// Close closes the client connections and the server.
func (s *Server) Close() {
	s.once.Do(func() {
		s.CloseClientConnections()
		s.Server.Close()
	})
}
