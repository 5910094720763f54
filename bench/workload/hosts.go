package workload

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

//go:embed testdata/workload.js
var jsSource string

// inputSchema is the wasm guests' input schema (the JavaScript tool
// declares its own, the same).
const inputSchema = `{"type": "object", "properties": {
  "mode": {"type": "string"},
  "n": {"type": "integer", "minimum": 0},
  "asks": {"type": "integer", "minimum": 0},
  "name": {"type": "string"}
}, "required": ["mode"]}`

func manifest(engine string) host.Manifest {
	return host.Manifest{
		Name: ToolName, Description: "sandflow benchmark workloads", Entry: host.EntryExecute,
		InputSchema: json.RawMessage(inputSchema), Engine: engine,
	}
}

// sandbox is a host on its own store.
type sandbox struct {
	st *store.Bolt
	h  *host.Host
}

// hostConfig says how to open a sandbox.
type hostConfig struct {
	path string // the store file
	sync bool   // fsync on commit: the store's real policy
	// maxWarm is host.Options.MaxWarm: 0 the default (64), -1 no parking.
	maxWarm int
	// runtimes whose engines the host needs besides wazero.
	runtimes []Runtime
	// preInit is host.Options.PreInit: pre-initialised instances per
	// plugin version in use.
	preInit int
	// snapshots turns host.Options.Snapshots on (every suspension that
	// parks nothing); off, runs resume by replay.
	snapshots bool
	// reload keeps no idle run's state (host.Options.IdleRuns -1): every
	// resume that finds no parked instance loads the run's state from the
	// store (its image and the events after it, or its log), as the first
	// one after a restart does.
	reload bool
}

// open opens a store and a host on it with the shared engines.
func open(c hostConfig) (*sandbox, error) {
	engines := map[string]host.Engine{}
	def, err := Engine(host.EngineWazero)
	if err != nil {
		return nil, err
	}
	for _, rt := range c.runtimes {
		if rt == PlainGo {
			continue
		}
		e, err := Engine(rt.engine())
		if err != nil {
			return nil, err
		}
		engines[rt.engine()] = e
	}
	var so *store.Options
	if !c.sync {
		so = &store.Options{NoSync: true}
	}
	st, err := store.Open(c.path, so)
	if err != nil {
		return nil, err
	}
	snaps, idle := -1, 0
	if c.snapshots {
		snaps = 1
	}
	if c.reload {
		idle = -1
	}
	h, err := host.Open(context.Background(), st, &host.Options{
		Engine: def, Engines: engines, Agents: echoAgents(), MaxWarm: c.maxWarm, NoFetch: true, PreInit: c.preInit, Snapshots: snaps, IdleRuns: idle,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	return &sandbox{st: st, h: h}, nil
}

func (s *sandbox) close() {
	s.h.Close(context.Background())
	s.st.Close()
}

// register adds the runtime's workload plugin and returns its version.
func (s *sandbox) register(rt Runtime) (int, error) {
	ctx := context.Background()
	var p host.Plugin
	var err error
	if rt == JS {
		p, err = jsprogram.RegisterTool(ctx, s.h, ToolName, []byte(jsSource))
	} else {
		var mod []byte
		if mod, err = rt.module(); err != nil {
			return 0, err
		}
		p, err = s.h.AddPlugin(ctx, mod, manifest(rt.engine()))
	}
	if err != nil {
		return 0, fmt.Errorf("registering the %s workload: %w", rt, err)
	}
	return p.Version, nil
}

// answer is how the benchmarks answer every question.
var answer = host.Answer{OptionID: "ok"}

// askOf returns the question a waiting run waits on.
func askOf(ri host.RunInfo) (string, error) {
	for _, w := range ri.Waiting {
		if w.Kind == "ask" {
			return w.AskID, nil
		}
	}
	return "", fmt.Errorf("run %s is %s, not waiting on a question (%+v, error %v)", ri.ID, ri.Status, ri.Waiting, ri.Error)
}

// finish drives a run to its end, answering its questions as they come.
func (s *sandbox) finish(ri host.RunInfo) (host.RunInfo, error) {
	ctx := context.Background()
	for {
		var err error
		switch ri.Status {
		case store.StatusCompleted:
			return ri, nil
		case store.StatusWaiting:
			var ask string
			if ask, err = askOf(ri); err != nil {
				return ri, err
			}
			ri, err = s.h.AnswerAsk(ctx, ask, answer)
		case store.StatusRunning:
			ri, err = s.h.Drive(ctx, ri.ID)
		default:
			return ri, fmt.Errorf("run %s ended %s: %v", ri.ID, ri.Status, ri.Error)
		}
		if err != nil {
			return ri, fmt.Errorf("run %s: %w", ri.ID, err)
		}
	}
}

// call runs a workload to its end and checks its result.
func (s *sandbox) call(in Input, version int) (host.RunInfo, error) {
	ri, err := s.h.Call(context.Background(), ToolName, in.json(), &host.CallOptions{Version: version})
	if err != nil {
		return ri, err
	}
	if ri, err = s.finish(ri); err != nil {
		return ri, err
	}
	return ri, checkResult(in, ri.Result)
}

// want is every workload's result.
func (in Input) want() int { return in.N }

func checkResult(in Input, res json.RawMessage) error {
	if string(res) != strconv.Itoa(in.want()) {
		return fmt.Errorf("%s with n=%d: result %s, want %d", in.Mode, in.N, res, in.want())
	}
	return nil
}

// history exports a run's history.
func (s *sandbox) history(runID string) (*host.History, error) {
	var buf bytes.Buffer
	if err := s.h.ExportHistory(context.Background(), runID, &buf); err != nil {
		return nil, err
	}
	return host.ReadHistory(&buf)
}

// recorded is a completed run's history, recorded by the Go guest on
// wazero, which every runtime replays.
type recorded struct {
	in   Input
	hist *host.History
}

var (
	histMu sync.Mutex
	hists  = map[recordKey]*recorded{}
)

// record returns the history of a completed run of in, recorded once per
// process by the Go guest on wazero with parking on (each live step
// continues on the parked instance) and fsync off.
func record(in Input) (*recorded, error) { return recordOn(in, false) }

// recordKey names a recorded history: its input, and whether it was
// recorded on a host with pre-initialised instances (which its run
// records: sharedInit).
type recordKey struct {
	in      Input
	preInit bool
}

// recordOn is record on a host with pre-initialised instances or not.
func recordOn(in Input, preInit bool) (*recorded, error) {
	histMu.Lock()
	defer histMu.Unlock()
	key := recordKey{in, preInit}
	if r := hists[key]; r != nil {
		return r, nil
	}
	dir, err := scratch("record")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pool := 0
	if preInit {
		pool = preInitPool
	}
	s, err := open(hostConfig{path: filepath.Join(dir, "db"), preInit: pool})
	if err != nil {
		return nil, err
	}
	defer s.close()
	v, err := s.register(GoWazero)
	if err != nil {
		return nil, err
	}
	ri, err := s.call(in, v)
	if err != nil {
		return nil, err
	}
	hist, err := s.history(ri.ID)
	if err != nil {
		return nil, err
	}
	r := &recorded{in: in, hist: hist}
	hists[key] = r
	return r, nil
}

// scratch makes a fresh directory in the process's temporary directory.
func scratch(prefix string) (string, error) {
	shared.mu.Lock()
	root, err := tempDir()
	shared.mu.Unlock()
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(root, prefix+"-")
}
