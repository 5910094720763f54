package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// The C guest (examples/c-deploy) is the deploy tool written in C from
// abi/README.md alone, built with clang and wasi-libc. These tests hold it
// to what the Go twin (examples/deploy) does.

const cDeploy = "examples/c-deploy"

// cGuest builds a C guest from source, or reads the module committed
// beside it when the C toolchain is missing (guestbuild.BuildC). Missing
// both fails the test.
func cGuest(t testing.TB, dir string) []byte {
	t.Helper()
	p, err := guestbuild.BuildC(filepath.Join(repo(t), dir))
	if errors.Is(err, guestbuild.ErrNoCToolchain) {
		t.Fatalf("the C guest tests need the committed module or the C toolchain; install it with\n"+
			"\tapt-get install -y --no-install-recommends %s\n%v", guestbuild.CPackages, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// addCDeploy registers the C deploy tool, with its manifest changed by
// edit when it is not nil.
func addCDeploy(t testing.TB, f *fixture, edit func(*host.Manifest)) host.Plugin {
	t.Helper()
	m := manifest(t, cDeploy)
	if edit != nil {
		edit(&m)
	}
	p, err := f.h.AddPlugin(context.Background(), cGuest(t, cDeploy), m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exportHistory(t testing.TB, f *fixture, runID string) *host.History {
	t.Helper()
	var buf bytes.Buffer
	if err := f.h.ExportHistory(context.Background(), runID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return hist
}

// shape is a run's log with what differs between two executions of the
// same script left out: the kind of each event, the op it belongs to, and
// a step's name.
func shape(t testing.TB, f *fixture, runID string) []string {
	t.Helper()
	evs, err := f.h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		var d struct {
			Op, Step   *int
			Name       string
			Activation *int
		}
		json.Unmarshal(e.Data, &d)
		s := e.Kind
		if d.Op != nil {
			s += " op=" + mustJSON(t, *d.Op)
		}
		if d.Step != nil {
			s += " step=" + mustJSON(t, *d.Step)
		}
		if d.Name != "" {
			s += " " + d.Name
		}
		if d.Activation != nil {
			s += " activation=" + mustJSON(t, *d.Activation)
		}
		out = append(out, s)
	}
	return out
}

func TestCGuestDeployApproveAcrossRestart(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		addCDeploy(t, f, nil)
		ri := f.call("c-deploy", `{"service":"api"}`)
		if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "ask" {
			t.Fatalf("after call: %+v", ri)
		}
		askID := ri.Waiting[0].AskID
		if want := "Deploy api?\n\nbuild api → push image → roll out 3 replicas"; ri.Waiting[0].Prompt != want {
			t.Errorf("prompt %q, want %q", ri.Waiting[0].Prompt, want)
		}
		f.restart()
		ri, err := f.h.AnswerAsk(ctx, askID, host.Answer{OptionID: "approve"})
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status != store.StatusCompleted {
			t.Fatalf("after answer: %+v", ri)
		}
		want := `{"deployed":true,"url":"https://api.deploys.invalid/releases/` + ri.ID + `-3"}`
		if string(ri.Result) != want {
			t.Errorf("result %s, want %s", ri.Result, want)
		}
		if n := countOutput(t, f.h, ri.ID, "planned deploy of api"); n != 1 {
			t.Errorf("plan step ran %d times, want 1", n)
		}
		if n := countOutput(t, f.h, ri.ID, "applied deploy of api"); n != 1 {
			t.Errorf("apply step ran %d times, want 1", n)
		}
		if n := countOutput(t, f.h, ri.ID, "side effect: applied deploy of api (step "+ri.ID+":3, attempt 1)\n"); n != 1 {
			t.Errorf("apply step's line is not the Go twin's")
		}
	})
}

func TestCGuestDeployRejected(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		addCDeploy(t, f, nil)
		ri := f.call("c-deploy", `{"service":"web"}`)
		if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
			t.Fatalf("after call: %+v", ri)
		}
		ri, err := f.h.AnswerAsk(context.Background(), ri.Waiting[0].AskID, host.Answer{OptionID: "cancel"})
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status != store.StatusCompleted || string(ri.Result) != `{"deployed":false,"reason":"rejected"}` {
			t.Fatalf("after answer: %+v result %s", ri, ri.Result)
		}
		if n := countOutput(t, f.h, ri.ID, "planned deploy of web"); n != 1 {
			t.Errorf("plan step ran %d times, want 1", n)
		}
		if n := countOutput(t, f.h, ri.ID, "applied deploy"); n != 0 {
			t.Errorf("apply step ran %d times, want 0", n)
		}
	})
}

// The Go twin and the C guest, given the same calls and answers, return
// the same results and write logs of the same shape: the same ops at the
// same positions in the same activations, the same output lines.
func TestCGuestMatchesGoTwin(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		f.add("examples/deploy")
		addCDeploy(t, f, nil)
		for _, tc := range []struct{ name, input, answer string }{
			{"approve", `{"service":"api"}`, "approve"},
			{"cancel", `{"service":"web"}`, "cancel"},
			{"escaped", `{"service":"a\"b\\c\u00e9\ud83d\ude80\u0001<&>\u2028"}`, "approve"},
			{"blank service", `{"service":" \t\u00a0"}`, ""}, // the plan step fails
		} {
			t.Run(tc.name, func(t *testing.T) {
				var results, errs, outputs [2]string
				var shapes [2][]string
				for i, tool := range []string{"deploy", "c-deploy"} {
					ri := f.call(tool, tc.input)
					if tc.answer != "" {
						if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
							t.Fatalf("%s: %+v", tool, ri)
						}
						var err error
						if ri, err = f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: tc.answer}); err != nil {
							t.Fatal(err)
						}
					}
					results[i] = strings.ReplaceAll(string(ri.Result), ri.ID, "RUN")
					if ri.Error != nil {
						errs[i] = ri.Error.Type + ": " + ri.Error.Message
					}
					evs, _ := f.h.Events(ctx, ri.ID)
					for _, e := range evs {
						if e.Kind == host.EvOutput {
							var d struct{ Data string }
							json.Unmarshal(e.Data, &d)
							outputs[i] += strings.ReplaceAll(d.Data, ri.ID, "RUN")
						}
					}
					shapes[i] = shape(t, f, ri.ID)
				}
				if results[0] != results[1] || errs[0] != errs[1] {
					t.Errorf("Go twin: %s %s\nC guest: %s %s", results[0], errs[0], results[1], errs[1])
				}
				if outputs[0] != outputs[1] {
					t.Errorf("output differs\nGo twin: %q\nC guest: %q", outputs[0], outputs[1])
				}
				if !reflect.DeepEqual(shapes[0], shapes[1]) {
					t.Errorf("logs differ\nGo twin: %q\nC guest: %q", shapes[0], shapes[1])
				}
				if tc.answer == "" && errs[1] != "FatalError: no service named" {
					t.Errorf("blank service: %q", errs[1])
				}
			})
		}
	})
}

// The C guest's histories, exported, replay against the C module: every
// recorded op is asked for again, in the same activation.
func TestCGuestHistoryReplays(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		addCDeploy(t, f, nil)
		wasm := cGuest(t, cDeploy)
		answer := func(ri host.RunInfo, opt string) host.RunInfo {
			ri, err := f.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: opt})
			if err != nil {
				t.Fatal(err)
			}
			return ri
		}
		for _, tc := range []struct {
			name string
			ri   host.RunInfo
			end  string
			ops  int
		}{
			{"approved", answer(f.call("c-deploy", `{"service":"api"}`), "approve"), "completed", 4},
			{"rejected", answer(f.call("c-deploy", `{"service":"web"}`), "cancel"), "completed", 3},
			{"waiting", f.call("c-deploy", `{"service":"db"}`), "suspended", 2},
			{"plan failed", f.call("c-deploy", `{"service":" "}`), "completed", 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rep, err := f.h.CheckReplay(ctx, exportHistory(t, f, tc.ri.ID), wasm)
				if err != nil {
					t.Fatalf("replay: %v (%+v)", err, rep)
				}
				if rep.Ops != tc.ops || rep.RecordedOps != tc.ops || rep.End != tc.end {
					t.Errorf("report %+v, want %d of %d ops, end %s", rep, tc.ops, tc.ops, tc.end)
				}
			})
		}
	})
}

// The Go twin and the C guest issue the same op sequence (step planDeploy,
// ask, step applyDeploy, complete, in the same activations), and inputs are
// not compared on replay: so a Go history replays against the C module and
// a C history against the Go module. A history whose ops differ from the C
// guest's does not.
func TestCGuestReplaysGoHistory(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		f.add("examples/deploy")
		addCDeploy(t, f, nil)
		cWasm, goWasm := cGuest(t, cDeploy), guest(t, "examples/deploy")

		goRun := f.call("deploy", `{"service":"api"}`)
		goRun, err := f.h.AnswerAsk(ctx, goRun.Waiting[0].AskID, host.Answer{OptionID: "approve"})
		if err != nil || goRun.Status != store.StatusCompleted {
			t.Fatalf("Go twin: %+v %v", goRun, err)
		}
		goHist := exportHistory(t, f, goRun.ID)
		rep, err := f.h.CheckReplay(ctx, goHist, cWasm)
		if err != nil || rep.Ops != 4 || rep.RecordedOps != 4 || rep.End != "completed" {
			t.Fatalf("Go history against the C module: %+v %v", rep, err)
		}

		cRun := f.call("c-deploy", `{"service":"api"}`)
		cRun, err = f.h.AnswerAsk(ctx, cRun.Waiting[0].AskID, host.Answer{OptionID: "approve"})
		if err != nil || cRun.Status != store.StatusCompleted {
			t.Fatalf("C guest: %+v %v", cRun, err)
		}
		rep, err = f.h.CheckReplay(ctx, exportHistory(t, f, cRun.ID), goWasm)
		if err != nil || rep.Ops != 4 || rep.RecordedOps != 4 || rep.End != "completed" {
			t.Fatalf("C history against the Go module: %+v %v", rep, err)
		}

		// The Go history with its apply step renamed: the C guest asks for
		// applyDeploy at position 3 and is caught.
		for i, e := range goHist.Events {
			if e.Kind == host.EvStepStarted {
				goHist.Events[i].Data = bytes.Replace(e.Data, []byte(`"applyDeploy"`), []byte(`"applyDeployV2"`), 1)
			}
		}
		rep, err = f.h.CheckReplay(ctx, goHist, cWasm)
		var nd *host.NonDeterminismError
		if !errors.As(err, &nd) || !errors.Is(err, host.ErrNonDeterminism) {
			t.Fatalf("want a *NonDeterminismError, got %v (%+v)", err, rep)
		}
		if nd.Position != 3 || nd.Expected.Kind != abi.OpStep || nd.Expected.Name != "applyDeployV2" ||
			nd.Actual.Kind != abi.OpStep || nd.Actual.Name != "applyDeploy" {
			t.Errorf("divergence %+v", nd)
		}
	})
}

// A recorded op the host refuses: with a payload limit the plan fits in but
// the question does not, the ask op is answered too_large. The C guest
// does not expect that status for an ask and ends the run with the host's
// error object, as the Go twin does; the refusal is recorded, so the
// history replays.
func TestCGuestRefusedOp(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		// For service "api" the plan step's result is 135 bytes
		// ({"result": ...} 146) and the question 198.
		limit := func(m *host.Manifest) { m.Limits = &host.ManifestLimits{PayloadBytes: 170} }
		addCDeploy(t, f, limit)
		m := manifest(t, "examples/deploy")
		limit(&m)
		if _, err := f.h.AddPlugin(ctx, guest(t, "examples/deploy"), m); err != nil {
			t.Fatal(err)
		}
		var errs [2]*abi.ErrorObject
		for i, tool := range []string{"deploy", "c-deploy"} {
			ri := f.call(tool, `{"service":"api"}`)
			if ri.Status != store.StatusFailed || ri.Error == nil {
				t.Fatalf("%s: %+v", tool, ri)
			}
			errs[i] = ri.Error
			if tool == "deploy" {
				continue
			}
			if ri.Error.Type != "PayloadTooLargeError" {
				t.Errorf("C guest failed with %+v, want a PayloadTooLargeError", ri.Error)
			}
			if n := countOutput(t, f.h, ri.ID, "planned deploy of api"); n != 1 {
				t.Errorf("plan step ran %d times, want 1", n)
			}
			refused := false
			evs, _ := f.h.Events(ctx, ri.ID)
			for _, e := range evs {
				refused = refused || e.Kind == host.EvOpRefused
			}
			if !refused {
				t.Errorf("no %s event in %q", host.EvOpRefused, shape(t, f, ri.ID))
			}
			rep, err := f.h.CheckReplay(ctx, exportHistory(t, f, ri.ID), cGuest(t, cDeploy))
			if err != nil || rep.Ops != rep.RecordedOps || rep.End != "completed" {
				t.Errorf("replay: %+v %v", rep, err)
			}
		}
		if !reflect.DeepEqual(errs[0], errs[1]) {
			t.Errorf("Go twin failed with %+v, C guest with %+v", errs[0], errs[1])
		}
	})
}
