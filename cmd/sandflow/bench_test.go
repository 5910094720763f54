package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

// sandflow bench runs a cheap figure in process (no peers) and writes the
// results for benchstat, the report and the command line.
func TestCLIBench(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "results")
	stdout := c.ok("bench", "--peers", "off", "--run", "op-roundtrip/go$", "--count", "2", "--benchtime", "1x", "--out", out)
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
	if !strings.Contains(string(command), "sandflow --data ") || !strings.Contains(string(command), " bench --peers off --run 'op-roundtrip/go$' --count 2") {
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
	} {
		c.expect(exitUsage, append([]string{"bench", "--peers", "off", "--out", out}, args...)...)
	}
	if errs := c.expect(exitError, "bench", "--peers", "off", "--run", "no-such-figure", "--out", out); !strings.Contains(errs, "no figure matches") {
		t.Errorf("stderr: %s", errs)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed bench made its --out directory: %v", err)
	}

	// Outside the source tree there are no guests to build.
	cmd := exec.Command(bin, "bench", "--peers", "off", "--out", out)
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
