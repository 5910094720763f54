package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

var bin string

// TestMain builds the sandflow binary once: the tests run it as separate
// processes, as a user would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandflow-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "sandflow")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building sandflow: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type cli struct {
	t    *testing.T
	data string
	pre  []string // flags before every command's own (--store URL, say)
}

func newCLI(t *testing.T) *cli { return &cli{t: t, data: t.TempDir()} }

// run runs sandflow and returns stdout, stderr and the exit code.
func (c *cli) run(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(bin, append(append([]string{"--data", c.data}, c.pre...), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// ok runs sandflow and fails the test unless it exits 0.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("sandflow %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func (c *cli) expect(code int, args ...string) string {
	c.t.Helper()
	out, errs, got := c.run(args...)
	if got != code {
		c.t.Fatalf("sandflow %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, out, errs)
	}
	return errs
}

func (c *cli) addExample(name string) string {
	c.t.Helper()
	root, err := guestbuild.RepoRoot()
	if err != nil {
		c.t.Fatal(err)
	}
	src := filepath.Join(root, name)
	wasm, err := guestbuild.Build(src)
	if err != nil {
		c.t.Fatal(err)
	}
	c.ok("plugin", "add", wasm, "--manifest", filepath.Join(src, "manifest.json"))
	return wasm
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return v
}

func compact(t *testing.T, b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compacting %q: %v", b, err)
	}
	return buf.String()
}

type shown struct {
	Run    host.RunInfo
	Events []store.Event
}

func outputCount(evs []store.Event, s string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == host.EvOutput {
			n += strings.Count(string(e.Data), s)
		}
	}
	return n
}

func TestCLIDeployAnsweredFromAnotherProcess(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, c.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].AskID == "" {
		t.Fatalf("call: %+v", ri)
	}
	askID := ri.Waiting[0].AskID
	if out := c.ok("asks", "list"); !strings.Contains(out, askID) || !strings.Contains(out, "approve|cancel") {
		t.Errorf("asks list:\n%s", out)
	}
	done := decode[host.RunInfo](t, c.ok("asks", "answer", askID, "approve", "--json"))
	if done.Status != store.StatusCompleted || !strings.Contains(compact(t, done.Result), `"deployed":true`) {
		t.Fatalf("answer: %+v", done)
	}
	s := decode[shown](t, c.ok("runs", "show", ri.ID, "--json"))
	if n := outputCount(s.Events, "planned deploy of api"); n != 1 {
		t.Errorf("plan step ran %d times across the processes, want 1", n)
	}
	if n := outputCount(s.Events, "applied deploy of api"); n != 1 {
		t.Errorf("apply step ran %d times, want 1", n)
	}
	if out := c.ok("runs", "show", ri.ID); !strings.Contains(out, "question "+askID+" answered: approve") {
		t.Errorf("timeline:\n%s", out)
	}
	// Errors a script can tell apart.
	c.expect(exitConflict, "asks", "answer", askID, "approve")
	c.expect(exitNotFound, "asks", "answer", "ask_unknown", "approve")
	c.expect(exitNotFound, "call", "nope")
	c.expect(exitInvalid, "call", "deploy", "--input", `{"service":`)
	c.expect(exitInvalid, "call", "deploy", "--input", `{"service":""}`)
	c.expect(exitUsage, "call")
	c.expect(exitUsage, "asks", "answer", askID)
	c.expect(exitNotFound, "runs", "show", "run_missing")
	if out := c.ok("runs", "list"); !strings.Contains(out, ri.ID) || !strings.Contains(out, "completed") {
		t.Errorf("runs list:\n%s", out)
	}
	// The history replays against its plugin; exported, it replays too,
	// and a changed plugin fails the check with exit 4.
	if out := c.ok("replay", ri.ID); !strings.Contains(out, "consistent") {
		t.Errorf("replay:\n%s", out)
	}
	hist := filepath.Join(t.TempDir(), "run.history.zst")
	c.ok("runs", "export", ri.ID, "-o", hist)
	if f, err := os.Open(hist); err != nil {
		t.Fatal(err)
	} else {
		head := make([]byte, 4)
		io.ReadFull(f, head)
		f.Close()
		if !bytes.Equal(head, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("export is not zstd: % x", head)
		}
	}
	c.ok("replay", "--history", hist)
	root, _ := guestbuild.RepoRoot()
	v2, err := guestbuild.Build(filepath.Join(root, "host/testdata/guests/deploy-v2"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.expect(exitNonDeterminism, "replay", "--history", hist, "--plugin", v2); !strings.Contains(errs, "non-deterministic") {
		t.Errorf("replay against v2: %s", errs)
	}
}

// waitLine reads r until a line contains s, or fails after d.
func waitLine(t *testing.T, r io.Reader, s string, d time.Duration) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.Contains(sc.Text(), s) {
				found <- true
				io.Copy(io.Discard, r)
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("output ended without %q", s)
		}
	case <-time.After(d):
		t.Fatalf("no %q within %s", s, d)
	}
}

func TestCLISleepSurvivesAKilledProcess(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/remind")
	call := exec.Command(bin, "--data", c.data, "call", "remind", "--input", `{"note":"stand up","delay":"2s"}`, "--run-id", "remind-1", "--wait", "1m")
	stderr, _ := call.StderrPipe()
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, stderr, "firing its timers", 30*time.Second)
	call.Process.Signal(syscall.SIGKILL) // mid-sleep, no goodbye
	call.Wait()

	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0")
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, serr, "run=remind-1 timer=sleep:2 status=completed", 30*time.Second)
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Errorf("serve did not stop cleanly: %v", err)
	}
	s := decode[shown](t, c.ok("runs", "show", "remind-1", "--json"))
	if s.Run.Status != store.StatusCompleted || compact(t, s.Run.Result) != `{"reminder":"stand up"}` {
		t.Fatalf("run: %+v", s.Run)
	}
	fired := 0
	for _, e := range s.Events {
		if e.Kind == host.EvTimerFired {
			fired++
		}
	}
	if fired != 1 {
		t.Errorf("the timer fired %d times", fired)
	}
}

func TestCLIStoreLocked(t *testing.T) {
	c := newCLI(t)
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0")
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, serr, "serving", 30*time.Second)
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}()
	// A command the server's API cannot serve for the CLI.
	if errs := c.expect(exitLocked, "runs", "upgrade", "run_x", "--version", "2"); !strings.Contains(errs, "in use by another process") {
		t.Errorf("%s", errs)
	}
}
