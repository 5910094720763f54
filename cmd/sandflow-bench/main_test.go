package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

var bin string

// TestMain builds the sandflow-bench binary once: the tests run it as
// separate processes, as a user would (its JavaScript figures re-execute
// it as their workers).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandflow-bench-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "sandflow-bench")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building sandflow-bench: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type cli struct{ t *testing.T }

func newCLI(t *testing.T) *cli { return &cli{t: t} }

// run runs sandflow-bench and returns stdout, stderr and the exit code.
func (c *cli) run(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(bin, args...)
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

// ok runs sandflow-bench and fails the test unless it exits 0.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("sandflow-bench %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func (c *cli) expect(code int, args ...string) string {
	c.t.Helper()
	out, errs, got := c.run(args...)
	if got != code {
		c.t.Fatalf("sandflow-bench %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, out, errs)
	}
	return errs
}

// sandflow-bench runs a cheap figure in process (no peers) and writes the
// results for benchstat, the report and the command line.
func TestCLIBench(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "results")
	stdout := c.ok("--peers", "off", "--run", "op-roundtrip/go$", "--count", "2", "--benchtime", "1x", "--out", out)
	line := regexp.MustCompile(`(?m)^BenchmarkOpRoundTrip/go(-\d+)?\s+1\s+[0-9.]+ ns/op\s+[0-9.]+ ns/roundtrip\s+\d+ B/op\s+\d+ allocs/op$`)
	results, err := os.ReadFile(filepath.Join(out, "results.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(line.FindAllString(string(results), -1)); n != 2 || !strings.Contains(string(results), "goos: ") {
		t.Errorf("results.txt has %d result lines, want 2:\n%s", n, results)
	}
	if stdout != string(results) {
		t.Errorf("stdout is not results.txt:\n%s\n---\n%s", stdout, results)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"op-roundtrip/go", "Peers were not run", "--peers off"} {
		if !bytes.Contains(report, []byte(s)) {
			t.Errorf("report.html lacks %q", s)
		}
	}
	command, err := os.ReadFile(filepath.Join(out, "command.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(command), "sandflow-bench --peers off --run 'op-roundtrip/go$' --count 2 --benchtime 1x --out ") {
		t.Errorf("command.txt: %s", command)
	}
}

func TestCLIBenchErrors(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "results")
	for _, args := range [][]string{
		{"--count", "0"},
		{"--peers", "maybe"},
		{"--benchtime", "soon"},
		{"--run", "("},
		{"extra"},
		{"--no-such-flag"},
	} {
		c.expect(exitUsage, append([]string{"--peers", "off", "--out", out}, args...)...)
	}
	if errs := c.expect(exitError, "--peers", "off", "--run", "no-such-figure", "--out", out); !strings.Contains(errs, "no figure matches") {
		t.Errorf("stderr: %s", errs)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed bench made its --out directory: %v", err)
	}

	// Outside the source tree there are no guests to build.
	cmd := exec.Command(bin, "--peers", "off", "--out", out)
	cmd.Dir = t.TempDir()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitError || !strings.Contains(errb.String(), "inside a checkout") {
		t.Errorf("bench outside the repository: %v\n%s", err, errb.String())
	}
}

// --peers auto runs the peers only where bench/peers and go are there.
func TestPeersMissing(t *testing.T) {
	if note := peersMissing(t.TempDir()); !strings.Contains(note, "bench/peers is not in this source tree") {
		t.Errorf("a tree without bench/peers: %q", note)
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("go"); err == nil {
		if note := peersMissing(root); note != "" {
			t.Errorf("this repository, with go on PATH: %q", note)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if note := peersMissing(root); !strings.Contains(note, "no go command") {
		t.Errorf("no go on PATH: %q", note)
	}
}
