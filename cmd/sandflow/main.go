// Command sandflow runs durable workflow tools for AI agents in sandboxes:
// add plugins, call tools, answer their questions, resume their hooks,
// inspect, export and replay runs, and serve the scheduler that fires
// their timers.
//
// Data lives in ./.sandflow unless --data or SANDFLOW_DATA says otherwise;
// with --store postgres://… (SANDFLOW_STORE) runs, logs and plugins live in
// that PostgreSQL database, which several hosts share.
// Guests run on wazero unless --engine or SANDFLOW_ENGINE says wasmtime.
// Exit codes are listed by `sandflow help exit-codes`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/postgres"
)

// Exit codes a script can rely on.
const (
	exitOK             = 0
	exitError          = 1  // anything not listed below
	exitUsage          = 2  // bad flags or arguments
	exitRunFailed      = 3  // the run failed or was cancelled
	exitNonDeterminism = 4  // a replay diverged from its history
	exitNotFound       = 5  // unknown tool, run, question, hook token or file
	exitInvalid        = 6  // invalid input, answer, plugin or manifest
	exitConflict       = 7  // question already settled, run id taken, run ended
	exitLocked         = 8  // another process has the data directory open
	exitDamaged        = 9  // the data directory is damaged (doctor found damage, or a read met it)
	exitUnreachable    = 10 // the --store database could not be reached
)

const exitCodesHelp = `Exit codes:
  0  success (a call whose run waits on something is a success)
  1  any other error
  2  bad flags or arguments
  3  the run failed or was cancelled
  4  a replay diverged from its history (non-deterministic plugin)
  5  not found: tool, run, question, hook token or file
  6  invalid: tool input, answer, plugin module or manifest
  7  conflict: question already settled, run id taken, run has ended
  8  the data directory is in use by another sandflow process
  9  the data directory is damaged: a checksum, page or journal record that
     does not check out, or a store file that is empty or not a store
     (sandflow doctor lists what; nothing is repaired)
 10  the PostgreSQL store named by --store (SANDFLOW_STORE) could not be
     reached: nothing listens there, the login was refused, or it did not
     answer in time (a --store that does not parse is exit 2)
`

type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &codedError{code, err} }

// codeOf maps an error to its exit code.
func codeOf(err error) int {
	var ee *codedError
	if errors.As(err, &ee) {
		return ee.code
	}
	switch {
	case errors.Is(err, host.ErrNonDeterminism):
		return exitNonDeterminism
	case errors.Is(err, host.ErrUnknownTool), errors.Is(err, host.ErrRunNotFound), errors.Is(err, host.ErrUnknownAsk),
		errors.Is(err, host.ErrUnknownHook), errors.Is(err, os.ErrNotExist):
		return exitNotFound
	case errors.Is(err, host.ErrBadInput), errors.Is(err, host.ErrBadAnswer), errors.Is(err, host.ErrBadPlugin),
		errors.Is(err, host.ErrBadManifest), errors.Is(err, host.ErrBadHistory), errors.Is(err, host.ErrLimit):
		return exitInvalid
	case errors.Is(err, host.ErrAskClosed), errors.Is(err, host.ErrRunExists), errors.Is(err, host.ErrRunEnded):
		return exitConflict
	case errors.Is(err, store.ErrLocked):
		return exitLocked
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrNotStore):
		return exitDamaged
	case errors.Is(err, postgres.ErrUnreachable):
		return exitUnreachable
	case errors.Is(err, postgres.ErrBadConnString):
		return exitUsage
	}
	return exitError
}

type app struct {
	dataDir    string
	storeURL   string // --store: a PostgreSQL database instead of the data directory's store
	engine     string
	agentsPath string
	agents     *agents.Backends
	js         *jsprogram.Engine
	jsWorkers  int // jsprogram.Options.MaxWorkers (serve --js-workers)
	jsParked   int // jsprogram.Options.MaxParked (serve --js-parked)
	asJSON     bool
	out        io.Writer
	errOut     io.Writer
}

// open opens the data directory with the --engine engine as the default
// (a manifest may name another); each engine caches compiled modules under
// <data>/cache/<engine>.
func (a *app) open(ctx context.Context) (*host.Host, error) {
	return a.openWith(ctx, &host.Options{})
}

func (a *app) openWith(ctx context.Context, o *host.Options) (*host.Host, error) {
	return a.openMode(ctx, o, false)
}

// openMode opens the data directory, read-only when readOnly: the store
// file is then never written. A read-only open falls back to a writable
// one when the store must be written first (it does not exist yet, or its
// journal holds writes a stopped process left to recover).
func (a *app) openMode(ctx context.Context, o *host.Options, readOnly bool) (*host.Host, error) {
	o.EngineName = a.engine
	if a.agentsPath != "" && a.agents == nil {
		b, err := loadAgents(ctx, a.agentsPath)
		if err != nil {
			return nil, err
		}
		a.agents = b
	}
	if a.agents != nil {
		o.Agents = a.agents.AgentBackend
	}
	// JavaScript programs run in workers: this binary, re-executed.
	if a.js == nil {
		if a.jsWorkers < 0 {
			return nil, withCode(exitUsage, fmt.Errorf("--js-workers must be 0 (the default) or more, not %d", a.jsWorkers))
		}
		js, err := jsprogram.NewEngine(&jsprogram.Options{MaxWorkers: a.jsWorkers, MaxParked: a.jsParked})
		if err != nil {
			return nil, err
		}
		a.js = js
	}
	o.Engines = map[string]host.Engine{jsprogram.EngineName: a.js}
	if a.agents != nil && a.agents.Loop != nil {
		o.Engines[agents.LoopEngineName] = a.agents.Loop.Engine()
		if a.storeURL != "" && os.Getenv("SANDFLOW_APPROVAL_SECRET") == "" {
			// A secret in this host's data directory would not verify
			// the approvals another host signed.
			return nil, withCode(exitUsage, errors.New("loop agents on a shared store (--store) need SANDFLOW_APPROVAL_SECRET, the same on every host: each host would sign approvals with a secret of its own, and refuse the others'"))
		}
		if a.agents.Loop.SecretFile == "" {
			// Approvals are signed with SANDFLOW_APPROVAL_SECRET, else
			// with a secret made once and kept in the data directory.
			a.agents.Loop.SecretFile = filepath.Join(a.dataDir, "approval-secret")
		}
	}
	var h *host.Host
	var err error
	if a.storeURL != "" {
		// The data directory keeps what is this host's own: its compiled
		// modules, tokens and serve.json.
		o.CacheDir = filepath.Join(a.dataDir, "cache")
		h, err = host.OpenPostgres(ctx, a.storeURL, o)
	} else if readOnly {
		h, err = host.OpenDirReadOnly(ctx, a.dataDir, o)
		if host.NeedsWritableOpen(err) {
			h, err = host.OpenDir(ctx, a.dataDir, o)
		}
	} else {
		h, err = host.OpenDir(ctx, a.dataDir, o)
	}
	if errors.Is(err, host.ErrUnknownEngine) {
		return nil, withCode(exitUsage, err)
	}
	if err == nil && !readOnly && a.agents != nil && a.agents.Loop != nil {
		// The loop agents' tools, registered again only when an agent's
		// settings changed.
		if err = a.agents.Loop.Attach(ctx, h); err != nil {
			h.Close(context.Background())
			return nil, withCode(exitInvalid, fmt.Errorf("--agents: %w", err))
		}
	}
	return h, err
}

// closeEngines stops the JavaScript workers, after the host closed.
func (a *app) closeEngines() {
	if a.js != nil {
		a.js.Close(context.Background())
		a.js = nil
	}
}

// withHost opens the data directory, runs fn, and closes it.
func (a *app) withHost(ctx context.Context, fn func(h *host.Host) error) error {
	return a.withHostMode(ctx, false, fn)
}

// withHostRO is withHost for commands that only read: the store is opened
// read-only.
func (a *app) withHostRO(ctx context.Context, fn func(h *host.Host) error) error {
	return a.withHostMode(ctx, true, fn)
}

func (a *app) withHostMode(ctx context.Context, readOnly bool, fn func(h *host.Host) error) error {
	h, err := a.openMode(ctx, &host.Options{}, readOnly)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return lockedError(a.dataDir, err)
		}
		return err
	}
	defer a.closeEngines()
	defer h.Close(context.Background())
	return fn(h)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func defaultDataDir() string {
	if d := os.Getenv("SANDFLOW_DATA"); d != "" {
		return d
	}
	return ".sandflow"
}

func defaultEngine() string {
	if e := os.Getenv("SANDFLOW_ENGINE"); e != "" {
		return e
	}
	return host.EngineWazero
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "sandflow",
		Short:         "Durable workflow tools for AI agents, in sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.dataDir, "data", defaultDataDir(), "data directory (env SANDFLOW_DATA)")
	root.PersistentFlags().StringVar(&a.storeURL, "store", os.Getenv("SANDFLOW_STORE"), "a PostgreSQL database (postgres://USER@HOST:PORT/DB) holding runs, logs and plugins, shared by several hosts, instead of the data directory's embedded store (env SANDFLOW_STORE)")
	root.PersistentFlags().StringVar(&a.engine, "engine", defaultEngine(), "WebAssembly engine: wazero, or wasmtime in a build with cgo (env SANDFLOW_ENGINE)")
	root.PersistentFlags().BoolVar(&a.asJSON, "json", false, "print JSON for scripts")
	root.PersistentFlags().StringVar(&a.agentsPath, "agents", os.Getenv("SANDFLOW_AGENTS"), "JSON file of scripted agents runs may call (env SANDFLOW_AGENTS)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.AddCommand(
		pluginCmd(a), workflowCmd(a), toolsCmd(a), callCmd(a), runsCmd(a), asksCmd(a), hooksCmd(a), replayCmd(a), serveCmd(a), mcpCmd(a), demoCmd(a), doctorCmd(a),
		exitCodesCmd(a), versionCmd(a),
	)
	refuseUnknownSubcommands(root)
	return root
}

// exitCodesCmd lists the exit codes, as a command and as the help topic
// `sandflow help exit-codes`.
func exitCodesCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "exit-codes", Short: "List the exit codes", Args: args(cobra.NoArgs), Run: func(c *cobra.Command, _ []string) {
		fmt.Fprint(a.out, exitCodesHelp)
	}}
	c.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(a.out, exitCodesHelp) })
	return c
}

func versionCmd(a *app) *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version of this binary (module version, commit, Go version)", Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			v := buildVersion()
			if a.asJSON {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.out, "sandflow %s", v.Version)
			if v.Commit != "" {
				fmt.Fprintf(a.out, " (commit %s", v.Commit)
				if v.Modified {
					fmt.Fprint(a.out, ", modified")
				}
				fmt.Fprint(a.out, ")")
			}
			fmt.Fprintf(a.out, " %s\n", v.Go)
			return nil
		}}
}

type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// buildVersion reads the version the Go toolchain stamped into the binary:
// the module version ("(devel)" for a build from a checkout) and, for a
// build from a git checkout, the commit.
func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// refuseUnknownSubcommands makes every command that only groups others
// (sandflow, sandflow runs, …) refuse an unknown subcommand with exit 2;
// without one it prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	if c.HasSubCommands() {
		if c.Run == nil && c.RunE == nil {
			c.Args = func(c *cobra.Command, argv []string) error {
				if len(argv) > 0 {
					msg := fmt.Sprintf("unknown command %q for %q", argv[0], c.CommandPath())
					if s := c.SuggestionsFor(argv[0]); len(s) > 0 {
						msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
					}
					return &usageError{msg + "\nrun '" + c.CommandPath() + " --help' for its commands"}
				}
				return nil
			}
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
		for _, sub := range c.Commands() {
			refuseUnknownSubcommands(sub)
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errOut: stderr}
	root := newRoot(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		code := codeOf(err)
		if code == exitError && isUsageError(err) {
			code = exitUsage
		}
		if a.asJSON {
			printJSONError(stderr, err, code)
		} else {
			fmt.Fprintln(stderr, "sandflow:", err)
		}
		return code
	}
	return exitOK
}

// exitNames are the stable names of the exit codes, in --json errors.
var exitNames = map[int]string{
	exitError:          "error",
	exitUsage:          "usage",
	exitRunFailed:      "run_failed",
	exitNonDeterminism: "non_deterministic",
	exitNotFound:       "not_found",
	exitInvalid:        "invalid",
	exitConflict:       "conflict",
	exitLocked:         "locked",
	exitDamaged:        "damaged",
	exitUnreachable:    "unreachable",
}

// printJSONError writes an error as one JSON object, for scripts that ran
// a command with --json: {"error":{"code":"not_found","exitCode":5,"message":…}}.
func printJSONError(w io.Writer, err error, code int) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": exitNames[code], "exitCode": code, "message": err.Error()}})
	fmt.Fprintf(w, "%s\n", b)
}

// isUsageError recognises cobra's argument errors, which are plain.
func isUsageError(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// args wraps a cobra positional-args check so its failures exit 2.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if err := check(c, a); err != nil {
			return &usageError{err.Error() + "\nusage: " + c.UseLine()}
		}
		return nil
	}
}

func main() {
	jsprogram.MaybeWorker()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
