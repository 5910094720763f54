// Command sandflow-bench runs sandflow's benchmark suite, with the peers
// (Temporal, Extism, raw wazero), and writes a report. It is a binary of
// its own, not a command of sandflow, because the suite is built on
// package testing's benchmarks, which the production binary does not link.
//
// It needs the sandflow source tree, since the guests are built from
// source: run it inside a checkout, e.g.
//
//	go run ./cmd/sandflow-bench --run '^replay/' --count 3
//
// Exit codes: 0 success, 1 an error, 2 bad flags or arguments.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/bench/suite"
	"github.com/sandflow/sandflow/bench/workload"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/jsprogram"
)

// Exit codes a script can rely on.
const (
	exitOK    = 0
	exitError = 1 // anything not listed below
	exitUsage = 2 // bad flags or arguments
)

// peersDir is where the peers' module is, in the repository.
const peersDir = "bench/peers"

// app is where the command writes.
type app struct {
	out, errOut io.Writer
}

// usageError is a bad flag or argument: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	// The JavaScript runtime's figures run workers that re-execute this
	// binary.
	jsprogram.MaybeWorker()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line argv (argv[0] is the program's name) and
// returns the exit code.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errOut: stderr}
	root := benchCmd(a, argv)
	root.SetArgs(argv[1:])
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "sandflow-bench:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// benchCmd is the command; argv is recorded in command.txt.
func benchCmd(a *app, argv []string) *cobra.Command {
	var count int
	var sequential bool
	var benchtime, filter, out, peers string
	c := &cobra.Command{
		Use:           "sandflow-bench",
		Short:         "Run the benchmark suite, with the peers, and write a report",
		SilenceUsage:  true,
		SilenceErrors: true,
		Long: `sandflow-bench runs sandflow's benchmark suite (bench/workload: replay, resume, op round trip,
step commits, memory, upload, live runs, on every runtime) and prints each result as
go test -bench does, so that benchstat reads it. In --out it writes results.txt (those
lines), report.html (charts, a table of every figure, and the goals the suite is
judged by) and command.txt (this command line).

It needs the sandflow source tree, since the guests are built from source: run it
inside a checkout. With --peers auto (the default) or on, and go on PATH, it builds
bench/peers' cmd/suite (a module of its own, with Temporal's and Extism's SDKs) and
runs the suite there, sandflow's figures and the peers' in one process; with --peers
off, or auto when go or bench/peers is missing, it runs sandflow's figures in this
process and the report says that the peers were not run.

--run selects figures by a regular expression on group/name, as listed in the report:
replay/wazero/n=1000, op-roundtrip/go, tool-call/extism, ...

The figures run in rounds: every figure once, then every figure again, --count
times, so that two figures a goal compares (a resume at n=10,000 and at n=10,
sandflow's replay and Temporal's) share the machine's slow and fast minutes alike.
--sequential runs each figure --count times in a row instead, as go test -count does.`,
		Args: func(c *cobra.Command, args []string) error {
			if err := cobra.NoArgs(c, args); err != nil {
				return &usageError{err.Error() + "\nusage: " + c.UseLine()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 {
				return &usageError{"--count must be 1 or more"}
			}
			if peers != "auto" && peers != "on" && peers != "off" {
				return &usageError{fmt.Sprintf("--peers %q: want auto, on or off", peers)}
			}
			if _, err := regexp.Compile(filter); err != nil {
				return &usageError{fmt.Sprintf("--run: %v", err)}
			}
			if benchtime != "" {
				if err := suite.SetBenchtime(benchtime); err != nil {
					return &usageError{"--" + err.Error()}
				}
			}
			root, err := guestbuild.RepoRoot()
			if err != nil {
				return fmt.Errorf("sandflow-bench builds its guests from source: run it inside a checkout of github.com/sandflow/sandflow (%w)", err)
			}
			outDir, err := filepath.Abs(out)
			if err != nil {
				return err
			}
			cfg := suite.Config{
				Count: count, Benchtime: benchtime, Run: filter, Sequential: sequential, OutDir: outDir,
				Command: suite.CommandLine(argv), Stdout: a.out, Stderr: a.errOut,
			}
			note := peersMissing(root)
			switch {
			case peers == "off":
				cfg.PeersNote = "--peers off"
			case note == "":
				return runWithPeers(cmd.Context(), a, filepath.Join(root, peersDir), cfg)
			case peers == "on":
				return fmt.Errorf("--peers on: %s", note)
			default:
				cfg.PeersNote = note
				fmt.Fprintf(a.errOut, "peers not run: %s\n", note)
			}
			return suite.RunAndReport(cmd.Context(), workload.Suite(), cfg)
		},
	}
	c.Flags().IntVar(&count, "count", suite.DefaultCount, "run each figure `n` times")
	c.Flags().BoolVar(&sequential, "sequential", false, "run each figure's runs one after another (as go test -count) instead of in rounds")
	c.Flags().StringVar(&benchtime, "benchtime", "", "run each figure for `d`: a duration, or Nx for N iterations (default 1s)")
	c.Flags().StringVar(&filter, "run", "", "run only the figures whose group/name matches `regexp`")
	c.Flags().StringVar(&out, "out", "bench-results", "write results.txt, report.html and command.txt in `dir`")
	c.Flags().StringVar(&peers, "peers", "auto", "run the peers (Temporal, Extism, raw wazero) too: auto, on or off")
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	return c
}

// peersMissing says why the peers cannot run from root, or "" when they
// can: bench/peers is there and go is on PATH.
func peersMissing(root string) string {
	if _, err := os.Stat(filepath.Join(root, peersDir, "go.mod")); err != nil {
		return peersDir + " is not in this source tree"
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "no go command on PATH to build " + peersDir
	}
	return ""
}

// runWithPeers builds bench/peers' cmd/suite and runs it in dir with c's
// settings, its output streaming through. It is built, then run, rather
// than go run, so that an interrupt reaches the suite itself, which then
// writes its report of what ran.
func runWithPeers(ctx context.Context, a *app, dir string, c suite.Config) error {
	tmp, err := os.MkdirTemp("", "sandflow-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "suite")
	fmt.Fprintf(a.errOut, "building %s/cmd/suite (sandflow's figures and the peers, in one process)\n", peersDir)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/suite")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off")
	build.Stdout, build.Stderr = a.errOut, a.errOut
	if err := build.Run(); err != nil {
		return fmt.Errorf("building %s/cmd/suite: %w (--peers off runs sandflow's figures alone)", peersDir, err)
	}
	argv := []string{"--count", strconv.Itoa(c.Count), "--out", c.OutDir, "--command", c.Command}
	if c.Benchtime != "" {
		argv = append(argv, "--benchtime", c.Benchtime)
	}
	if c.Run != "" {
		argv = append(argv, "--run", c.Run)
	}
	if c.Sequential {
		argv = append(argv, "--sequential")
	}
	run := exec.CommandContext(ctx, bin, argv...)
	run.Dir = dir
	run.Stdout, run.Stderr = a.out, a.errOut
	// On an interrupt the suite finishes the benchmark in progress and
	// writes its report; it is killed if it takes longer than this.
	run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
	run.WaitDelay = 10 * time.Minute
	if err := run.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("the suite exited with status %d", ee.ExitCode())
		}
		return err
	}
	return nil
}
