package workload

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) {
	jsprogram.MaybeWorker()
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

func skipUnavailable(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Every workload gives its result in every runtime, live with and
// without parking, and its history and the Go guest's replay there.
func TestWorkloads(t *testing.T) {
	for _, rt := range Runtimes() {
		t.Run(string(rt), func(t *testing.T) {
			for _, w := range append(Workloads(), StepsAsk) {
				t.Run(string(w), func(t *testing.T) {
					skipUnavailable(t, Check(rt, w, 3))
				})
			}
		})
	}
}

// A replay check is not vacuous: a history whose input asks for another
// workload diverges at its first op, on every runtime.
func TestReplayDiverges(t *testing.T) {
	rec, err := record(Input{Mode: Steps, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	hist := *rec.hist
	hist.Events = append([]host.HistoryEvent(nil), rec.hist.Events...)
	var d map[string]any
	if err := json.Unmarshal(hist.Events[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	d["input"] = Input{Mode: AskStep, N: 3}
	if hist.Events[0].Data, err = json.Marshal(d); err != nil {
		t.Fatal(err)
	}
	eachSandbox(t, func(t *testing.T, rt Runtime, s *sandbox) {
		mod, err := rt.module()
		skipUnavailable(t, err)
		rep, err := s.h.CheckReplayOn(context.Background(), &hist, mod, rt.engine())
		var nd *host.NonDeterminismError
		if !errors.As(err, &nd) {
			t.Fatalf("replay of a steps history as askstep: %+v, %v; want a NonDeterminismError", rep, err)
		}
	})
	in, ops, err := ReplayOps(&hist)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plain(in, ops); !errors.Is(err, errNoRecord) {
		t.Fatalf("plain replay of a steps history as askstep: %v, want errNoRecord", err)
	}
}

// The resume figures' runs wait on a question after their steps, and go on
// to their result, also when they were made on the Go guest and moved to
// another runtime's plugin.
func TestPrepare(t *testing.T) {
	for _, rt := range []Runtime{GoWazero, CWazero, JS} {
		t.Run(string(rt), func(t *testing.T) {
			path := t.TempDir() + "/db"
			in := Input{Mode: StepsAsk, N: 3, Asks: 2}
			ids, err := prepare(path, rt, in, 2, false)
			skipUnavailable(t, err)
			s, err := open(hostConfig{path: path, maxWarm: -1, runtimes: []Runtime{rt}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			for _, id := range ids {
				ri, err := s.h.Run(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{true: 1, false: 2}[rt == GoWazero]; ri.Version != want {
					t.Errorf("run %s is on version %d", id, ri.Version)
				}
				if ri, err = s.finish(ri); err != nil {
					t.Fatal(err)
				}
				if ri.Status != store.StatusCompleted || checkResult(in, ri.Result) != nil {
					t.Fatalf("%s %s %v", ri.Status, ri.Result, ri.Error)
				}
			}
		})
	}
}

// Suite names every figure once.
func TestSuite(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Suite() {
		name := f.Group + "/" + f.Name()
		if seen[name] || f.Bench == nil {
			t.Errorf("figure %s twice or without a body", name)
		}
		seen[name] = true
	}
	for _, g := range []string{GroupReplay, GroupColdResume, GroupSnapshot, GroupSnapshotNoSync, GroupWarmResume, GroupOpRoundTrip, GroupStepCommits,
		GroupCommitsParallel, GroupSuspendedMemory, GroupParkedMemory, GroupUpload, GroupLive + "-steps"} {
		found := false
		for name := range seen {
			found = found || len(name) > len(g) && name[:len(g)+1] == g+"/"
		}
		if !found {
			t.Errorf("no figure in group %s", g)
		}
	}
}

// The greet tool of the tool-call figures gives every runtime's guest the
// same greeting, names with escapes and non-ASCII text included; the Go
// and C guests write json.Marshal's bytes.
func TestGreet(t *testing.T) {
	var in Input
	if err := json.Unmarshal([]byte(GreetInput), &in); err != nil || in != (Input{Mode: Greet, Name: GreetName}) {
		t.Fatalf("GreetInput %s decodes to %+v (%v)", GreetInput, in, err)
	}
	if out, err := PlainGreet(json.RawMessage(GreetInput)); err != nil || string(out) != GreetResult {
		t.Fatalf("PlainGreet(GreetInput) = %s, %v; want %s", out, err, GreetResult)
	}
	names := []string{GreetName, ``, `a "quoted" <b> & \ back/slash`, "tab\tnew\nline\r\b\f\x01\x1f", "é ü 😀 日本"}
	eachSandbox(t, func(t *testing.T, rt Runtime, s *sandbox) {
		v, err := s.register(rt)
		skipUnavailable(t, err)
		for _, name := range names {
			ri, err := s.h.Call(context.Background(), ToolName, Input{Mode: Greet, Name: name}.json(), &host.CallOptions{Version: v})
			if err == nil {
				ri, err = s.finish(ri)
			}
			if err != nil {
				t.Fatalf("greet %q: %v", name, err)
			}
			want, err := json.Marshal(map[string]string{"greeting": "hello " + name})
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Greeting string }
			if err := json.Unmarshal(ri.Result, &got); err != nil || got.Greeting != "hello "+name {
				t.Fatalf("greet %q: %s %s, %v", name, ri.Status, ri.Result, err)
			}
			if rt != JS && string(ri.Result) != string(want) {
				t.Errorf("greet %q: %s, json.Marshal writes %s", name, ri.Result, want)
			}
		}
		// A name that is not a string never reaches the guest: the
		// tool's input schema refuses it.
		_, err = s.h.Call(context.Background(), ToolName, []byte(`{"mode":"greet","name":5}`), &host.CallOptions{Version: v})
		if !errors.Is(err, host.ErrBadInput) {
			t.Errorf("greet with a number for a name: %v, want ErrBadInput", err)
		}
	})
}

// eachSandbox runs body as a subtest for every WebAssembly and JavaScript
// runtime, on a sandbox of its own.
func eachSandbox(t *testing.T, body func(t *testing.T, rt Runtime, s *sandbox)) {
	for _, rt := range Runtimes() {
		if rt == PlainGo {
			continue
		}
		t.Run(string(rt), func(t *testing.T) {
			s, err := open(hostConfig{path: t.TempDir() + "/db", runtimes: []Runtime{rt}})
			skipUnavailable(t, err)
			defer s.close()
			body(t, rt, s)
		})
	}
}
