package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sandflow/sandflow/bench/workload"
)

// The files RunAndReport writes in its directory.
const (
	ResultsFile = "results.txt" // the benchstat lines
	ReportFile  = "report.html" // the report
	CommandFile = "command.txt" // the command line
)

// Config is a suite run as a command makes it: what to run, and where the
// results go.
type Config struct {
	// Count, Benchtime are as in Options; Run is the filter, a regular
	// expression ("" selects every figure).
	Count     int
	Benchtime string
	Run       string
	// Sequential is as in Options.
	Sequential bool
	// OutDir receives ResultsFile, ReportFile and CommandFile.
	OutDir string
	// Command is the command line, recorded in CommandFile and the report.
	Command string
	// PeersNote says why the peers are not among the figures; "" when
	// they are.
	PeersNote string
	// Stdout receives the benchstat lines as they come, Stderr the
	// progress and notes.
	Stdout, Stderr io.Writer
}

// RunAndReport runs the figures that c selects with Run, streaming the
// results to c.Stdout and ResultsFile, then writes ReportFile, and cleans
// up what bench/workload made (workload.Cleanup). The report is written
// also when the run was interrupted (ctx) or figures failed; the error
// then says so.
func RunAndReport(ctx context.Context, figures []workload.Figure, c Config) error {
	var filter *regexp.Regexp
	if c.Run != "" {
		var err error
		if filter, err = regexp.Compile(c.Run); err != nil {
			return fmt.Errorf("run filter: %w", err)
		}
	}
	if c.Count < 0 {
		return fmt.Errorf("count %d: want 1 or more", c.Count)
	}
	if c.Benchtime != "" {
		if err := SetBenchtime(c.Benchtime); err != nil {
			return err
		}
	}
	if len(Select(figures, filter)) == 0 {
		return fmt.Errorf("%w %q", ErrNoFigures, c.Run)
	}
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.OutDir, CommandFile), []byte(c.Command+"\n"), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(c.OutDir, ResultsFile))
	if err != nil {
		return err
	}
	defer workload.Cleanup()
	started := time.Now()
	results, runErr := Run(ctx, figures, Options{
		Count: c.Count, Benchtime: c.Benchtime, Filter: filter, Sequential: c.Sequential,
		Out: io.MultiWriter(c.Stdout, f), Progress: c.Stderr,
	})
	if err := f.Close(); err != nil && runErr == nil {
		runErr = err
	}
	count := c.Count
	if count == 0 {
		count = DefaultCount
	}
	rep := &Report{
		Results: results, Env: Env(), Command: c.Command,
		Count: count, Benchtime: c.Benchtime, Filter: c.Run, Sequential: c.Sequential, PeersNote: c.PeersNote,
		Started: started, Elapsed: time.Since(started), Interrupted: ctx.Err() != nil,
	}
	if err := writeReport(filepath.Join(c.OutDir, ReportFile), rep); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Fprintf(c.Stderr, "wrote %s, %s and %s in %s\n", ResultsFile, ReportFile, CommandFile, c.OutDir)
	if runErr != nil {
		return runErr
	}
	var failed []string
	for _, r := range results {
		if r.Failed {
			failed = append(failed, Key(r.Figure))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d figures failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

func writeReport(path string, r *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CommandLine joins a command's arguments as a shell would read them back:
// an argument with a character the shell treats specially is put in
// single quotes. The program is named by its base name, so that a
// recorded command holds no path of the machine's.
func CommandLine(args []string) string {
	if len(args) == 0 {
		return ""
	}
	quoted := []string{filepath.Base(args[0])}
	for _, a := range args[1:] {
		quoted = append(quoted, shellQuote(a))
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
