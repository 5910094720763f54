package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

func (a *app) printAdded(p host.Plugin) error {
	if a.asJSON {
		return a.printJSON(p)
	}
	fmt.Fprintf(a.out, "added %s version %d (module %s, %d bytes, entry %s)\n", p.Name, p.Version, shortHash(p.ModuleHash), p.Size, p.Manifest.Entry)
	return nil
}

func pluginCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "plugin", Short: "Add and list plugins"}
	var manifestPath, name string
	add := &cobra.Command{
		Use:   "add FILE.wasm --manifest MANIFEST.json | FILE.js [--name NAME]",
		Short: "Check, compile and register a plugin module (or a JavaScript tool script) as its tool's next version",
		Long: "Registers a WebAssembly module with its manifest, or a JavaScript tool script: a script that calls\n" +
			"defineWorkflowTool({ description, inputSchema, execute | task }). A script needs no manifest: its\n" +
			"definition is read by running it, and the tool is named by --name or the file's name.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			module, err := os.ReadFile(argv[0])
			if err != nil {
				return err
			}
			u := plugins.Upload{Module: module, Name: name, Path: argv[0]}
			if manifestPath != "" {
				u.Manifest = func() ([]byte, error) { return os.ReadFile(manifestPath) }
			}
			d, err := plugins.Classify(u)
			var ue *plugins.UploadError
			if errors.As(err, &ue) {
				switch ue.Problem {
				case plugins.ProblemManifestForScript:
					return &usageError{"a JavaScript tool script needs no --manifest: its defineWorkflowTool call is its manifest"}
				case plugins.ProblemNoManifest:
					return &usageError{"--manifest is required for a WebAssembly module"}
				case plugins.ProblemNameForModule:
					return &usageError{"--name is for JavaScript tools; a module's manifest names its tool"}
				}
				return withCode(exitInvalid, err)
			}
			if err != nil {
				return err
			}
			return a.writeOrRemote(cmd.Context(), func(h *host.Host) error {
				p, err := jsprogram.Register(cmd.Context(), h, d)
				if err != nil {
					return err
				}
				return a.printAdded(p)
			}, func() error {
				p, err := a.remoteUpload(cmd.Context(), argv[0], module, manifestPath, d)
				if err != nil {
					return err
				}
				return a.printAdded(p)
			})
		},
	}
	add.Flags().StringVar(&name, "name", "", "a JavaScript tool's name (default: the file's name without .js)")
	add.Flags().StringVar(&manifestPath, "manifest", "", "the plugin's manifest (JSON)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List every plugin version",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			printPlugins := func(ps []host.Plugin) error {
				if a.asJSON {
					if ps == nil {
						ps = []host.Plugin{}
					}
					return a.printJSON(ps)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tVERSION\tENTRY\tMODULE\tSIZE\tADDED")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", p.Name, p.Version, p.Manifest.Entry, shortHash(p.ModuleHash), p.Size, p.CreatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				ps, err := h.Plugins(cmd.Context())
				if err != nil {
					return err
				}
				return printPlugins(ps)
			}, func() error {
				var out struct {
					Plugins []host.Plugin `json:"plugins"`
				}
				if err := a.remoteGet(cmd.Context(), "/v1/plugins", &out); err != nil {
					return err
				}
				return printPlugins(out.Plugins)
			})
		},
	}
	c.AddCommand(add, list)
	return c
}

func toolsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "tools",
		Short: "Print the tool list a model sees (names, descriptions, input schemas)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				ts, err := h.Tools(cmd.Context())
				if err != nil {
					return err
				}
				if ts == nil {
					ts = []host.Tool{}
				}
				return a.printJSON(ts)
			}, func() error {
				var out struct {
					Tools []host.Tool `json:"tools"`
				}
				if err := a.remoteGet(cmd.Context(), "/v1/tools", &out); err != nil {
					return err
				}
				if out.Tools == nil {
					out.Tools = []host.Tool{}
				}
				return a.printJSON(out.Tools)
			})
		},
	}
}

func callCmd(a *app) *cobra.Command {
	var input, inputFile, runID, taskID string
	var version int
	var noAsk bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "call TOOL [--input JSON] [--task-id RUN]",
		Short: "Call a tool: prints the run id and the result, or what the run waits on",
		Long: `Call starts a run and drives it until it completes, fails, or waits on
something outside it: a question, a timer, a hook. With --wait, it also
fires the run's own timers for up to that long, so a short sleep
completes (other runs' timers are fired by sandflow serve). With
--task-id, the call goes to a running serve tool's run (a resumable
task) instead of starting a run; the printed calls show each reply.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			raw := []byte(input)
			if inputFile != "" {
				var err error
				if raw, err = os.ReadFile(inputFile); err != nil {
					return err
				}
			}
			if len(bytes.TrimSpace(raw)) == 0 {
				raw = []byte("{}")
			}
			if taskID != "" && (runID != "" || version != 0 || noAsk) {
				return &usageError{"--task-id sends another call to a running serve task: --run-id, --version and --no-ask are for a new run"}
			}
			ctx := cmd.Context()
			return a.writeOrRemote(ctx, func(h *host.Host) error {
				var ri host.RunInfo
				var err error
				if taskID != "" {
					ri, err = sendToTask(ctx, h, argv[0], taskID, raw)
				} else {
					ri, err = h.Call(ctx, argv[0], raw, &host.CallOptions{RunID: runID, Version: version, NoAsk: noAsk})
				}
				if err != nil {
					return err
				}
				if wait > 0 && !ri.Status.Terminal() {
					fmt.Fprintf(a.errOut, "run %s is %s; firing its timers for up to %s\n", ri.ID, ri.Status, wait)
					ri, err = waitTimers(ctx, h, ri, wait)
					if err != nil {
						return err
					}
				}
				return a.report(ri)
			}, func() error {
				if taskID != "" {
					return withCode(exitLocked, fmt.Errorf("%w: --task-id goes to the data directory; while sandflow serve holds it, send the call through its API (POST /v1/sessions/{id}/calls, see API.md)", store.ErrLocked))
				}
				q := url.Values{"wait": {callWait(wait).String()}}
				if runID != "" {
					q.Set("runId", runID)
				}
				if version != 0 {
					q.Set("version", strconv.Itoa(version))
				}
				if noAsk {
					q.Set("noAsk", "true")
				}
				ri, err := a.remoteRun(ctx, http.MethodPost, "/v1/tools/"+escape(argv[0])+"/calls?"+q.Encode(), json.RawMessage(raw), callWait(wait))
				if err != nil {
					return err
				}
				if wait > 0 && onTimers(ri) {
					fmt.Fprintf(a.errOut, "run %s is %s; following it while sandflow serve fires its timers, for up to %s\n", ri.ID, ri.Status, wait)
					if ri, err = a.remoteWaitTimers(ctx, ri, wait); err != nil {
						return err
					}
				}
				return a.report(ri)
			})
		},
	}
	c.Flags().StringVar(&input, "input", "", "the tool input, a JSON object")
	c.Flags().StringVar(&inputFile, "input-file", "", "read the tool input from a file")
	c.Flags().StringVar(&runID, "run-id", "", "name the run (default: a random id)")
	c.Flags().StringVar(&taskID, "task-id", "", "send the call to this run of a serve tool (a resumable task) instead of starting one")
	c.Flags().IntVar(&version, "version", 0, "plugin version (default: the latest)")
	c.Flags().BoolVar(&noAsk, "no-ask", false, "no person can answer: questions resolve as unavailable")
	c.Flags().DurationVar(&wait, "wait", 0, "fire the run's timers for up to this long")
	return c
}

// sendToTask sends a call to a serve tool's run and drives the run until
// it waits again.
func sendToTask(ctx context.Context, h *host.Host, tool, runID string, input []byte) (host.RunInfo, error) {
	ri, err := h.Run(ctx, runID)
	if err != nil {
		return ri, err
	}
	if ri.Tool != tool {
		return ri, withCode(exitInvalid, fmt.Errorf("%w: task %s is a run of %s, not %s", host.ErrBadInput, runID, ri.Tool, tool))
	}
	if _, err := h.SendCall(ctx, runID, "", input); err != nil {
		return ri, err
	}
	return h.Drive(ctx, runID)
}

// waitTimers fires the run's due timers until it stops waiting on timers
// or the time is up. Other runs' timers are the scheduler's (sandflow
// serve).
func waitTimers(ctx context.Context, h *host.Host, ri host.RunInfo, d time.Duration) (host.RunInfo, error) {
	deadline := time.Now().Add(d)
	for onTimers(ri) && time.Now().Before(deadline) {
		if _, err := h.FireDueOf(ctx, ri.ID, time.Now()); err != nil {
			return ri, err
		}
		select {
		case <-ctx.Done():
			return ri, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		var err error
		if ri, err = h.Run(ctx, ri.ID); err != nil {
			return ri, err
		}
	}
	return ri, nil
}

// onTimers reports whether a run that has not ended is working or waits
// on a timer (a sleep, a step's retry): something that goes on without
// anyone acting.
func onTimers(ri host.RunInfo) bool {
	if ri.Status.Terminal() {
		return false
	}
	on := ri.Status == store.StatusRunning
	for _, w := range ri.Waiting {
		on = on || w.Kind == "sleep" || w.Kind == "step_retry"
	}
	return on
}

// reportSettled reports the run an answer, a withdrawal or a hook resume
// continued: the run as it stands even when driving it failed after the
// settlement was recorded.
func (a *app) reportSettled(ri host.RunInfo, err error) error {
	if err != nil && ri.ID == "" {
		return err
	}
	if rerr := a.report(ri); rerr != nil {
		return rerr
	}
	return err
}

// printCancelled prints a run a cancel ended.
func (a *app) printCancelled(ri host.RunInfo) error {
	if a.asJSON {
		return a.printJSON(ri)
	}
	printRun(a.out, ri)
	return nil
}

// shortHash is a module hash's first 12 hex digits, as listings show it.
func shortHash(h string) string { return h[:min(len(h), 12)] }

// report prints a run's state after an operation that drove it.
func (a *app) report(ri host.RunInfo) error {
	if a.asJSON {
		if err := a.printJSON(ri); err != nil {
			return err
		}
	} else {
		printRun(a.out, ri)
	}
	switch ri.Status {
	case store.StatusFailed:
		return withCode(exitRunFailed, fmt.Errorf("run %s failed: %s: %s", ri.ID, ri.Error.Type, firstLine(ri.Error.Message)))
	case store.StatusCancelled:
		return withCode(exitRunFailed, fmt.Errorf("run %s was cancelled", ri.ID))
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func printRun(w io.Writer, ri host.RunInfo) { printRunWith(w, ri, "sandflow") }

// printRunWith prints a run; its hints (how to answer, resume, send) name
// the command cmd, and are left out when cmd is "".
func printRunWith(w io.Writer, ri host.RunInfo, cmd string) {
	hint := func(format string, args ...any) string {
		if cmd == "" {
			return ""
		}
		return "\n    " + fmt.Sprintf(format, args...)
	}
	fmt.Fprintf(w, "run %s  tool %s v%d\n", ri.ID, ri.Tool, ri.Version)
	fmt.Fprintf(w, "status: %s\n", ri.Status)
	switch {
	case ri.Status == store.StatusCompleted:
		fmt.Fprintf(w, "result: %s\n", ri.Result)
	case ri.Status == store.StatusFailed && ri.Error != nil:
		fmt.Fprintf(w, "error: %s: %s\n", ri.Error.Type, ri.Error.Message)
		printErrorDetails(w, ri.Tool, ri.Error)
	}
	if len(ri.Progress) > 0 && !ri.Status.Terminal() {
		fmt.Fprintf(w, "progress: %s\n", ri.Progress)
	}
	if ri.Stalled != "" {
		fmt.Fprintf(w, "stalled: %s\n", ri.Stalled)
	}
	// A serve run's calls: each call's reply, and how to send the next.
	if len(ri.Calls) > 0 {
		fmt.Fprintln(w, "calls:")
		for _, c := range ri.Calls {
			switch {
			case c.Status == "completed":
				fmt.Fprintf(w, "  %d %s: replied %s\n", c.Index, c.CallID, c.Output)
			case c.Error != nil:
				fmt.Fprintf(w, "  %d %s: %s: %s: %s\n", c.Index, c.CallID, c.Status, c.Error.Type, firstLine(c.Error.Message))
			default:
				fmt.Fprintf(w, "  %d %s: %s\n", c.Index, c.CallID, c.Status)
			}
		}
	}
	var waits []string
	for _, wt := range ri.Waiting {
		switch wt.Kind {
		case "ask":
			waits = append(waits, fmt.Sprintf("  question %s:\n%s", wt.AskID, indent(wt.Prompt, "    | "))+
				hint("answer: %s asks answer %s OPTION (or --text TEXT); %s asks show %s lists the options", cmd, wt.AskID, cmd, wt.AskID))
		case "sleep":
			line := fmt.Sprintf("  timer until %s", wt.Until.Format(time.RFC3339))
			if d := time.Until(*wt.Until); d > 0 {
				line += fmt.Sprintf(" (in %s)", d.Round(time.Second))
			} else {
				line += fmt.Sprintf(" (due %s ago: sandflow serve fires it, or call --wait)", (-d).Round(time.Second))
			}
			waits = append(waits, line)
		case "hook":
			waits = append(waits, fmt.Sprintf("  hook %s", wt.Token)+hint("resume: %s hooks resume %s --payload JSON", cmd, wt.Token))
		case "webhook":
			if strings.HasPrefix(wt.URL, "/") {
				waits = append(waits, fmt.Sprintf("  webhook %s\n    deliver: POST to that path on a running sandflow serve (its --base-url, default http://ADDR)", wt.URL))
			} else {
				waits = append(waits, fmt.Sprintf("  webhook %s\n    deliver: POST to it while sandflow serve runs", wt.URL))
			}
		case "step":
			waits = append(waits, fmt.Sprintf("  step %s (attempt %d, running)", wt.Step, wt.Attempt))
		case "step_retry":
			waits = append(waits, fmt.Sprintf("  step %s retry at %s", wt.Step, wt.Until.Format(time.RFC3339)))
		case "agent":
			waits = append(waits, fmt.Sprintf("  agent %s (answering)", wt.Agent))
		case "receive":
			waits = append(waits, "  its next call"+hint("send: %s call %s --task-id %s --input JSON", cmd, ri.Tool, ri.ID))
		default:
			waits = append(waits, fmt.Sprintf("  %s", wt.Kind))
		}
	}
	if len(waits) > 0 {
		fmt.Fprintln(w, "waiting on:")
		for _, l := range waits {
			fmt.Fprintln(w, l)
		}
	}
}

// printErrorDetails prints where a JavaScript failure happened: its line
// and column, its code, and its stack, which names an authored tool's
// script by the tool (histories from before the engine did so name it
// tool.js) and leaves out the host's own frames. Other details are printed as JSON.
func printErrorDetails(w io.Writer, tool string, eo *abi.ErrorObject) {
	if len(eo.Details) == 0 {
		return
	}
	var d struct {
		Code   string `json:"code"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
		Stack  string `json:"stack"`
	}
	if json.Unmarshal(eo.Details, &d) != nil || (d.Line == 0 && d.Stack == "" && d.Code == "") {
		fmt.Fprintf(w, "details: %s\n", eo.Details)
		return
	}
	if d.Line > 0 && !strings.Contains(eo.Message, fmt.Sprintf("(line %d, column %d)", d.Line, d.Column)) {
		fmt.Fprintf(w, "at: line %d, column %d\n", d.Line, d.Column)
	}
	if d.Code != "" {
		fmt.Fprintf(w, "code: %s\n", d.Code)
	}
	if d.Stack != "" {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(d.Stack, "\n"), "\n") {
			if strings.Contains(l, "toolshim.js:") || strings.Contains(l, "shim.js:") {
				continue
			}
			lines = append(lines, strings.ReplaceAll(l, "(tool.js:", "("+tool+".js:"))
		}
		fmt.Fprintf(w, "stack:\n%s\n", indent(strings.Join(lines, "\n"), "  "))
	}
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func runsCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "runs", Short: "List, show, export, cancel and upgrade runs"}
	var status, tool string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch store.RunStatus(status) {
			case "", store.StatusRunning, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCancelled:
			default:
				return &usageError{fmt.Sprintf("--status %q is not running, waiting, completed, failed or cancelled", status)}
			}
			if limit < 0 {
				return &usageError{fmt.Sprintf("--limit %d is not a count", limit)}
			}
			printRuns := func(runs []store.Run) error {
				if a.asJSON {
					if runs == nil {
						runs = []store.Run{}
					}
					return a.printJSON(runs)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tTOOL\tVERSION\tSTATUS\tEVENTS\tCREATED")
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", r.ID, r.Tool, r.Version, r.Status, r.LastSeq, r.CreatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				runs, err := h.Runs(cmd.Context(), store.RunFilter{Status: store.RunStatus(status), Tool: tool, Limit: limit})
				if err != nil {
					return err
				}
				return printRuns(runs)
			}, func() error {
				q := url.Values{}
				if status != "" {
					q.Set("status", status)
				}
				if tool != "" {
					q.Set("tool", tool)
				}
				if limit > 0 {
					q.Set("limit", strconv.Itoa(limit))
				}
				var out struct {
					Runs []store.Run `json:"runs"`
				}
				if err := a.remoteGet(cmd.Context(), "/v1/runs?"+q.Encode(), &out); err != nil {
					return err
				}
				return printRuns(out.Runs)
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only runs in this status (running, waiting, completed, failed, cancelled)")
	list.Flags().StringVar(&tool, "tool", "", "only runs of this tool")
	list.Flags().IntVar(&limit, "limit", 0, "at most this many")

	show := &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run and its event timeline",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			show := func(ri host.RunInfo, evs []store.Event) error {
				if a.asJSON {
					return a.printJSON(struct {
						Run    host.RunInfo  `json:"run"`
						Events []store.Event `json:"events"`
					}{ri, evs})
				}
				printRun(a.out, ri)
				fmt.Fprintln(a.out, "timeline:")
				printTimeline(a.out, evs)
				return nil
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				ri, err := h.Run(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				evs, err := h.Events(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				return show(ri, evs)
			}, func() error {
				var out struct {
					Run host.RunInfo `json:"run"`
				}
				if err := a.remoteGet(cmd.Context(), "/v1/runs/"+escape(argv[0]), &out); err != nil {
					return err
				}
				hist, err := a.remoteHistory(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				evs := make([]store.Event, len(hist.Events))
				for i, e := range hist.Events {
					evs[i] = store.Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Data: e.Data}
				}
				return show(out.Run, evs)
			})
		},
	}

	var outPath string
	export := &cobra.Command{
		Use:   "export RUN [-o FILE]",
		Short: "Write a run's history as one zstd-compressed file (default RUN.history.zst)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			path := outPath
			if path == "" {
				path = argv[0] + ".history.zst"
			}
			var buf bytes.Buffer
			write := func() error {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					return err
				}
				if a.asJSON {
					return a.printJSON(struct {
						Run   string `json:"run"`
						Path  string `json:"path"`
						Bytes int    `json:"bytes"`
					}{argv[0], path, buf.Len()})
				}
				fmt.Fprintf(a.out, "wrote %s (%d bytes)\n", path, buf.Len())
				return nil
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				if err := h.ExportHistory(cmd.Context(), argv[0], &buf); err != nil {
					return err
				}
				return write()
			}, func() error {
				b, err := a.remoteBytes(cmd.Context(), "/v1/runs/"+escape(argv[0])+"/history")
				if err != nil {
					return err
				}
				buf.Write(b)
				return write()
			})
		},
	}
	export.Flags().StringVarP(&outPath, "output", "o", "", "the file to write")

	var reason string
	cancel := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: its questions are withdrawn, hooks disposed, timers dropped",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.writeOrRemote(cmd.Context(), func(h *host.Host) error {
				ri, err := h.Cancel(cmd.Context(), argv[0], reason)
				if err != nil {
					return err
				}
				return a.printCancelled(ri)
			}, func() error {
				r, err := a.server(false)
				if err != nil {
					return err
				}
				body, _ := json.Marshal(map[string]string{"reason": reason})
				var out struct {
					Run host.RunInfo `json:"run"`
				}
				if _, err := r.do(cmd.Context(), http.MethodPost, "/v1/runs/"+escape(argv[0])+"/cancel", "application/json", body, 0, &out); err != nil {
					return err
				}
				a.throughServer(r)
				return a.printCancelled(out.Run)
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "cancelled from the command line", "why, for the log")

	var toVersion int
	upgrade := &cobra.Command{
		Use:   "upgrade RUN --version N",
		Short: "Move a run to another plugin version, if that version replays its history",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if toVersion <= 0 {
				return &usageError{"--version is required"}
			}
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				ri, rep, err := h.Upgrade(cmd.Context(), argv[0], toVersion)
				if rep != nil && !a.asJSON {
					printReport(a.out, rep)
				}
				if err != nil {
					return err
				}
				return a.report(ri)
			})
		},
	}
	upgrade.Flags().IntVar(&toVersion, "version", 0, "the plugin version to move to")
	c.AddCommand(list, show, export, cancel, upgrade)
	return c
}

func printTimeline(w io.Writer, evs []store.Event) {
	start := time.Time{}
	for _, e := range evs {
		if start.IsZero() {
			start = e.Time
		}
		fmt.Fprintf(w, "  %4d  +%-9s  %s\n", e.Seq, e.Time.Sub(start).Round(time.Millisecond), host.DescribeEvent(e))
	}
}

func asksCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "asks", Short: "List and answer questions"}
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List open questions, oldest first (each prompt's first line: asks show QUESTION shows it whole)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			printQuestions := func(qs []host.Question) error {
				if a.asJSON {
					if qs == nil {
						qs = []host.Question{}
					}
					return a.printJSON(qs)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUESTION\tRUN\tTOOL\tOPEN\tOPTIONS\tPROMPT")
				for _, q := range qs {
					var opts []string
					for _, o := range q.Request.Options {
						opts = append(opts, o.ID)
					}
					if q.Request.AllowFreeform || q.Request.Display == "text" {
						opts = append(opts, "--text")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", q.ID, q.RunID, q.Tool, q.Open, strings.Join(opts, "|"), firstLine(q.Request.Prompt))
				}
				return tw.Flush()
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				qs, err := h.Questions(cmd.Context(), !all)
				if err != nil {
					return err
				}
				return printQuestions(qs)
			}, func() error {
				var out struct {
					Asks []host.Question `json:"asks"`
				}
				path := "/v1/asks"
				if all {
					path += "?all=true"
				}
				if err := a.remoteGet(cmd.Context(), path, &out); err != nil {
					return err
				}
				return printQuestions(out.Asks)
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "include settled questions")
	var text string
	answer := &cobra.Command{
		Use:   "answer QUESTION [OPTION] [--text TEXT]",
		Short: "Answer a question with one of its options, or with text, and continue its run",
		Args:  args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ans := host.Answer{Text: text}
			if len(argv) == 2 {
				ans.OptionID = argv[1]
			}
			if (ans.OptionID == "") == (ans.Text == "") {
				return &usageError{"give an OPTION or --text, not both or neither"}
			}
			return a.writeOrRemote(cmd.Context(), func(h *host.Host) error {
				ri, err := h.AnswerAsk(cmd.Context(), argv[0], ans)
				return a.reportSettled(ri, err)
			}, func() error {
				return a.remoteReport(cmd.Context(), http.MethodPost, "/v1/asks/"+escape(argv[0])+"/answer?wait="+callWait(0).String(), ans, callWait(0))
			})
		},
	}
	answer.Flags().StringVar(&text, "text", "", "answer with text")
	withdraw := &cobra.Command{
		Use:   "withdraw QUESTION",
		Short: "Withdraw a question: it resolves as cancelled, and its run continues",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.writeOrRemote(cmd.Context(), func(h *host.Host) error {
				ri, err := h.WithdrawAsk(cmd.Context(), argv[0])
				return a.reportSettled(ri, err)
			}, func() error {
				return a.remoteReport(cmd.Context(), http.MethodPost, "/v1/asks/"+escape(argv[0])+"/withdraw?wait="+callWait(0).String(), nil, callWait(0))
			})
		},
	}
	show := &cobra.Command{
		Use:   "show QUESTION",
		Short: "Show a question whole: its title, prompt, and options with their descriptions",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			show := func(q host.Question) error {
				if a.asJSON {
					return a.printJSON(q)
				}
				printQuestion(a.out, q)
				return nil
			}
			return a.readOrRemote(cmd.Context(), func(h *host.Host) error {
				q, err := h.Question(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				return show(q)
			}, func() error {
				var out struct {
					Ask host.Question `json:"ask"`
				}
				if err := a.remoteGet(cmd.Context(), "/v1/asks/"+escape(argv[0]), &out); err != nil {
					return err
				}
				return show(out.Ask)
			})
		},
	}
	c.AddCommand(list, show, answer, withdraw)
	return c
}

func printQuestion(w io.Writer, q host.Question) {
	state := "open"
	if !q.Open {
		state = "settled"
	}
	fmt.Fprintf(w, "question %s  run %s  tool %s  (%s, asked %s)\n", q.ID, q.RunID, q.Tool, state, q.CreatedAt.Format(time.RFC3339))
	if q.Request.Title != "" {
		fmt.Fprintf(w, "title: %s\n", q.Request.Title)
	}
	fmt.Fprintln(w, "prompt:")
	fmt.Fprintln(w, indent(q.Request.Prompt, "  "))
	if len(q.Request.Options) > 0 {
		fmt.Fprintln(w, "options:")
		for _, o := range q.Request.Options {
			fmt.Fprintf(w, "  %s: %s", o.ID, o.Label)
			if o.Style != "" {
				fmt.Fprintf(w, " [%s]", o.Style)
			}
			fmt.Fprintln(w)
			if o.Description != "" {
				fmt.Fprintln(w, indent(o.Description, "      "))
			}
		}
	}
	if q.Request.AllowFreeform || q.Request.Display == "text" {
		fmt.Fprintln(w, "text answers are allowed: --text TEXT")
	}
	if q.Open {
		fmt.Fprintf(w, "answer: sandflow asks answer %s OPTION (or --text TEXT)\n", q.ID)
	}
}

func hooksCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "hooks", Short: "Resume hooks"}
	var payload string
	resume := &cobra.Command{
		Use:   "resume TOKEN --payload JSON",
		Short: "Send a payload to the hook holding TOKEN and continue its run",
		Long: `Resume delivers a JSON payload to the hook holding TOKEN and continues
its run. The payload is required: give --payload null to send null.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if !cmd.Flags().Changed("payload") {
				return &usageError{"--payload is required (give --payload null to send null)\nusage: " + cmd.UseLine()}
			}
			return a.writeOrRemote(cmd.Context(), func(h *host.Host) error {
				ri, err := h.ResumeHook(cmd.Context(), argv[0], json.RawMessage(payload))
				return a.reportSettled(ri, err)
			}, func() error {
				return a.remoteReport(cmd.Context(), http.MethodPost, "/v1/hooks/"+escape(argv[0])+"?wait="+callWait(0).String(), json.RawMessage(payload), callWait(0))
			})
		},
	}
	resume.Flags().StringVar(&payload, "payload", "", "the payload, JSON (required; null for null)")
	c.AddCommand(resume)
	return c
}

func replayCmd(a *app) *cobra.Command {
	var historyPath, pluginPath string
	var strict bool
	c := &cobra.Command{
		Use:   "replay RUN | --history FILE [--plugin NEW.wasm|NEW.js] [--strict]",
		Short: "Re-run a history against its plugin, or a new module, and report any divergence",
		Long: `Replay re-runs a run's recorded history, read from the data directory or
from an exported file, against the plugin version it ran on, or against
another module given with --plugin (a CI check that a new version still
replays old histories). Nothing is recorded. Exits 4 on a divergence.

When the guest completes, its result (or error) is compared with the one
the history records. A different one is a warning, on stderr, and the
command still exits 0: the ops, not the result, decide whether a module
can take a run over. With --strict it is a divergence and exits 4.`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if (len(argv) == 1) == (historyPath != "") {
				return &usageError{"give a RUN or --history FILE"}
			}
			var wasm []byte
			if pluginPath != "" {
				var err error
				if wasm, err = os.ReadFile(pluginPath); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			return a.withHostRO(ctx, func(h *host.Host) error {
				var hist *host.History
				var err error
				if historyPath != "" {
					f, ferr := os.Open(historyPath)
					if ferr != nil {
						return ferr
					}
					defer f.Close()
					hist, err = host.ReadHistory(f)
				} else {
					var buf bytes.Buffer
					if err = h.ExportHistory(ctx, argv[0], &buf); err == nil {
						hist, err = host.ReadHistory(&buf)
					}
				}
				if err != nil {
					return err
				}
				var rep *host.ReplayReport
				if wasm != nil && plugins.IsScript(wasm) {
					rep, err = h.CheckReplayOn(ctx, hist, wasm, jsprogram.EngineName)
				} else {
					rep, err = h.CheckReplay(ctx, hist, wasm)
				}
				if err == nil && strict {
					err = rep.Strict()
				}
				if a.asJSON && rep != nil {
					out := struct {
						*host.ReplayReport
						Divergence string `json:"divergence,omitempty"`
					}{ReplayReport: rep}
					if err != nil {
						out.Divergence = err.Error()
					}
					if jerr := a.printJSON(out); jerr != nil {
						return jerr
					}
				} else if rep != nil {
					printReport(a.out, rep)
				}
				if err == nil && rep != nil && rep.Outcome == host.OutcomeDiffers {
					fmt.Fprintf(a.errOut, "warning: run %s: the guest completed with another result than the history records: %s (--strict makes this an error)\n", rep.RunID, rep.OutcomeDetail)
				}
				return err
			})
		},
	}
	c.Flags().StringVar(&historyPath, "history", "", "an exported history file")
	c.Flags().StringVar(&pluginPath, "plugin", "", "check against this module instead of the run's own")
	c.Flags().BoolVar(&strict, "strict", false, "a guest that completes with another result or error than the history's is a divergence (exit 4), not a warning")
	return c
}

func printReport(w io.Writer, rep *host.ReplayReport) {
	fmt.Fprintf(w, "run %s against module %s: replayed %d of %d recorded ops, into %d of %d recorded activations\n",
		rep.RunID, rep.Module[:min(12, len(rep.Module))], rep.Ops, rep.RecordedOps, rep.ActivationsReached, rep.Activations)
	switch rep.End {
	case "completed":
		switch rep.Outcome {
		case host.OutcomeSame:
			fmt.Fprintln(w, "consistent: the guest completed as recorded, with the recorded result")
		case host.OutcomeDiffers:
			fmt.Fprintf(w, "ops consistent, result differs: %s\n", rep.OutcomeDetail)
		default:
			fmt.Fprintln(w, "consistent: the guest completed where the history does (its result was not sent, so not compared)")
		}
	case "suspended":
		fmt.Fprintln(w, "consistent: the guest waits where the history ends")
	case "beyond":
		fmt.Fprintf(w, "consistent: the history ends and the guest goes on with %s\n", rep.Next)
	}
}
