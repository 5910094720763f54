// Command suite runs sandflow's whole benchmark suite with the peers in
// one process: bench/workload's figures and this module's (Temporal's
// replayer, Extism's calls, a raw wazero host call), through package
// bench/suite, which prints benchstat lines and writes an HTML report.
// `sandflow-bench` builds and runs it from this directory; it takes the
// same flags:
//
//	GOWORK=off go run ./cmd/suite --count 5 --benchtime 1s --run 'replay/' --out results
//
// It must run inside the sandflow repository: the guests are built from
// source.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandflow/sandflow/bench/peers"
	"github.com/sandflow/sandflow/bench/suite"
	"github.com/sandflow/sandflow/bench/workload"
	"github.com/sandflow/sandflow/jsprogram"
)

func main() {
	// The JavaScript runtime's figures run workers that re-execute this
	// binary.
	jsprogram.MaybeWorker()
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	count := fs.Int("count", suite.DefaultCount, "run each figure `n` times")
	benchtime := fs.String("benchtime", "", "run each figure for `d` (a duration, or Nx for N iterations; default 1s)")
	run := fs.String("run", "", "run only the figures whose group/name matches `regexp`")
	out := fs.String("out", "bench-results", "write results.txt, report.html and command.txt in `dir`")
	sequential := fs.Bool("sequential", false, "run each figure's runs one after another instead of in rounds")
	command := fs.String("command", "", "the command line to record (default: this one)")
	if err := fs.Parse(os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 || *count < 1 {
		fmt.Fprintln(os.Stderr, "suite: takes no arguments, and --count must be 1 or more")
		os.Exit(2)
	}
	if *command == "" {
		*command = suite.CommandLine(os.Args)
	}
	figures := suite.Peers{
		TemporalReplay:           peers.TemporalReplay,
		WazeroHostCall:           peers.WazeroHostCall,
		ExtismCall:               peers.ExtismCall,
		ExtismInstantiateAndCall: peers.ExtismInstantiateAndCall,
	}.AddTo(workload.Suite())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := suite.RunAndReport(ctx, figures, suite.Config{
		Count: *count, Benchtime: *benchtime, Run: *run, Sequential: *sequential, OutDir: *out, Command: *command,
		Stdout: os.Stdout, Stderr: os.Stderr,
	})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(1)
	}
}
