// Package workload is sandflow's benchmark suite: the same three workloads
// written for every runtime sandflow runs, and benchmark bodies that time
// them figure by figure, for a suite runner (bench/workload's own tests, or
// another module such as bench/peers) to call.
//
// # Workloads
//
//   - Steps: n sequential steps, each taking an int and returning int+1;
//     the body returns the last value (n).
//   - Fanout: n agent turns (ctx.agent) sent together and gathered at the
//     end; the body returns how many completed (n). The agent is a Go
//     function on the host that answers at once (host.AgentFunc).
//   - AskStep: n times, a question to a person and then a step; the body
//     returns n. The benchmarks answer each question as soon as it is
//     asked.
//
// A fourth input mode, stepsask (n steps, then questions), makes a run
// that waits on a question after n steps, for the resume and memory
// figures.
//
// # Runtimes
//
// The same logic runs as a Go guest (testdata/guests/workload, built with
// internal/guestbuild) on wazero and on wasmtime, as a C guest
// (testdata/guests/cworkload, clang and wasi-libc) on both engines, as an
// authored JavaScript tool (testdata/workload.js, on jsprogram), and as a
// plain Go function calling a Go step function: the unsandboxed floor
// (Plain). The three sandboxed versions make the same ops in the same order
// and activations, so a history recorded by one replays on the others; the
// replay figures use that.
//
// # Figures
//
// Each figure is a function of the runtime (and a size) that returns a
// benchmark body: Replay, ColdResume, WarmResume, OpRoundTrip, StepCommits,
// SuspendedMemory, ParkedMemory, UploadToFirstCall, and Live for a whole
// live run. Suite lists them with the sizes the suite reports, grouped.
//
// Guests are built and engines made once per process, with a compilation
// cache in a temporary directory that Cleanup removes. The JavaScript
// runtime runs programs in worker processes that re-execute the current
// binary: a process that uses it must call jsprogram.MaybeWorker first
// thing (in TestMain, for a test binary). A runtime this build or machine
// lacks (wasmtime without cgo, C without clang) is skipped, not failed.
package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/jsprogram"
)

// Runtime is where a workload runs.
type Runtime string

// The runtimes.
const (
	// GoWazero and GoWasmtime run the Go guest.
	GoWazero   Runtime = "wazero"
	GoWasmtime Runtime = "wasmtime"
	// CWazero and CWasmtime run the C guest.
	CWazero   Runtime = "c-wazero"
	CWasmtime Runtime = "c-wasmtime"
	// JS runs the JavaScript tool on jsprogram (goja in worker processes).
	JS Runtime = "js"
	// PlainGo runs the workload as an ordinary Go function: the floor.
	PlainGo Runtime = "go"
)

// Runtimes lists every runtime, the floor last.
func Runtimes() []Runtime {
	return []Runtime{GoWazero, GoWasmtime, CWazero, CWasmtime, JS, PlainGo}
}

// engine is the host engine a sandboxed runtime runs on.
func (rt Runtime) engine() string {
	switch rt {
	case GoWasmtime, CWasmtime:
		return host.EngineWasmtime
	case JS:
		return jsprogram.EngineName
	}
	return host.EngineWazero
}

// Workload names a workload; its string is the guests' input mode.
type Workload string

// The workloads.
const (
	Steps   Workload = "steps"
	Fanout  Workload = "fanout"
	AskStep Workload = "askstep"
	// StepsAsk is n steps and then Input.Asks questions: the run behind
	// the resume and memory figures.
	StepsAsk Workload = "stepsask"
	// Greet is the trivial tool of the tool-call figures: no ops; the
	// input {"mode":"greet","name":N} gives {"greeting":"hello N"}, the
	// guest work of bench/peers' Extism plugin.
	Greet Workload = "greet"
)

// GreetName, GreetInput and GreetResult are the greet call of the
// tool-call figures. bench/peers' Extism plugin is given the same input
// and must give the same result.
const (
	GreetName   = "world"
	GreetInput  = `{"mode":"greet","name":"world"}`
	GreetResult = `{"greeting":"hello world"}`
)

// Workloads lists the three workloads of the suite.
func Workloads() []Workload { return []Workload{Steps, Fanout, AskStep} }

// Input is a workload's tool input, as every runtime reads it.
type Input struct {
	Mode Workload `json:"mode"`
	N    int      `json:"n"`
	Asks int      `json:"asks,omitempty"`
	Name string   `json:"name,omitempty"` // greet's
}

func (in Input) json() json.RawMessage {
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	return b
}

// ToolName is the tool every runtime's workload plugin registers as.
const ToolName = "workload"

// AgentName is the agent the fanout workload calls.
const AgentName = "echo"

// Repository paths of the guests.
const (
	goGuestDir = "bench/workload/testdata/guests/workload"
	cGuestDir  = "bench/workload/testdata/guests/cworkload"
)

// ErrUnavailable is wrapped by the errors of Check (and makes the
// benchmark bodies skip) when this build or machine lacks the runtime:
// wasmtime without cgo, the C guest without clang-14 and wasi-libc.
var ErrUnavailable = errors.New("runtime not available")

// shared is what the process builds and makes once.
var shared struct {
	mu      sync.Mutex
	dir     string
	engines map[string]host.Engine
	js      *jsprogram.Engine
	modules map[string][]byte
}

// tempDir is the process's directory for compilation caches and scratch
// stores; Cleanup removes it.
func tempDir() (string, error) {
	if shared.dir == "" {
		d, err := os.MkdirTemp("", "sandflow-workload-")
		if err != nil {
			return "", err
		}
		shared.dir = d
	}
	return shared.dir, nil
}

// Cleanup closes the shared engines and removes the temporary directory.
// Call it once, after the benchmarks (from TestMain, say).
func Cleanup() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	ctx := context.Background()
	for _, e := range shared.engines {
		e.Close(ctx)
	}
	if shared.js != nil {
		shared.js.Close(ctx)
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	shared.engines, shared.js, shared.dir, shared.modules = nil, nil, "", nil
	histMu.Lock()
	hists = map[recordKey]*recorded{}
	histMu.Unlock()
	templateMu.Lock()
	templates = map[templateKey]*template{}
	templateMu.Unlock()
}

// Engine returns the process's engine of that name (host.EngineWazero,
// host.EngineWasmtime, or jsprogram.EngineName), made on first use with a
// compilation cache, so that each module compiles once per process. The
// error wraps ErrUnavailable when this build has no such engine.
func Engine(name string) (host.Engine, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return engineLocked(name)
}

func engineLocked(name string) (host.Engine, error) {
	if name == jsprogram.EngineName {
		if shared.js == nil {
			e, err := jsprogram.NewEngine(nil)
			if err != nil {
				return nil, err
			}
			shared.js = e
		}
		return shared.js, nil
	}
	if e := shared.engines[name]; e != nil {
		return e, nil
	}
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	e, err := host.NewEngine(context.Background(), name, filepath.Join(dir, "cache", name))
	if err != nil {
		if name == host.EngineWasmtime {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil, err
	}
	if shared.engines == nil {
		shared.engines = map[string]host.Engine{}
	}
	shared.engines[name] = e
	return e, nil
}

// repoFile is the path of a file of the repository, found from the working
// directory upward.
func repoFile(rel string) (string, error) {
	root, err := guestbuild.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), nil
}

// GoGuest returns the Go guest's module, built once per process.
func GoGuest() ([]byte, error) { return guest(goGuestDir, guestbuild.Build) }

// CGuest returns the C guest's module, built once per process, or the one
// committed beside its source when the C toolchain is missing. The error
// wraps guestbuild.ErrNoCToolchain when both are missing.
func CGuest() ([]byte, error) { return guest(cGuestDir, guestbuild.BuildC) }

func guest(rel string, build func(string) (string, error)) ([]byte, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if m := shared.modules[rel]; m != nil {
		return m, nil
	}
	dir, err := repoFile(rel)
	if err != nil {
		return nil, err
	}
	p, err := build(dir)
	if err != nil {
		if errors.Is(err, guestbuild.ErrNoCToolchain) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, err
	}
	m, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if shared.modules == nil {
		shared.modules = map[string][]byte{}
	}
	shared.modules[rel] = m
	return m, nil
}

// module returns what a sandboxed runtime runs: a wasm module or the
// JavaScript tool's source.
func (rt Runtime) module() ([]byte, error) {
	switch rt {
	case GoWazero, GoWasmtime:
		return GoGuest()
	case CWazero, CWasmtime:
		return CGuest()
	case JS:
		return []byte(jsSource), nil
	}
	return nil, fmt.Errorf("runtime %s runs no module", rt)
}

// need fails or skips b for an error getting a runtime ready.
func need(b testing.TB, err error) {
	b.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrUnavailable) {
		b.Skip(err)
	}
	b.Fatal(err)
}

// echoAgents answers every turn at once with the message echoed.
func echoAgents() host.AgentBackend {
	return host.AgentFunc{
		List: []host.AgentInfo{{Name: AgentName, Description: "answers at once"}},
		Fn: func(_ context.Context, t host.AgentTurn) (abi.AgentResult, error) {
			return EchoAgent(t.Message), nil
		},
	}
}

// EchoAgent is the fanout workload's agent: a completed turn whose reply
// is the message.
func EchoAgent(message string) abi.AgentResult {
	return abi.AgentResult{Status: abi.AgentCompleted, Reply: message}
}
