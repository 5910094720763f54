package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func (a *app) printAdded(p host.Plugin) error {
	if a.asJSON {
		return a.printJSON(p)
	}
	fmt.Fprintf(a.out, "added %s version %d (module %s, %d bytes, entry %s)\n", p.Name, p.Version, p.ModuleHash[:12], p.Size, p.Manifest.Entry)
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
			if manifestPath == "" && jsprogram.IsScript(module) {
				if name == "" {
					name = strings.TrimSuffix(filepath.Base(argv[0]), filepath.Ext(argv[0]))
				}
				return a.withHost(cmd.Context(), func(h *host.Host) error {
					p, err := jsprogram.RegisterTool(cmd.Context(), h, name, module)
					if err != nil {
						return err
					}
					return a.printAdded(p)
				})
			}
			if manifestPath == "" {
				return &usageError{"--manifest is required for a WebAssembly module"}
			}
			if name != "" {
				return &usageError{"--name is for JavaScript tools; a module's manifest names its tool"}
			}
			raw, err := os.ReadFile(manifestPath)
			if err != nil {
				return err
			}
			m, err := host.ParseManifest(raw)
			if err != nil {
				return err
			}
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				p, err := h.AddPlugin(cmd.Context(), module, m)
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
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				ps, err := h.Plugins(cmd.Context())
				if err != nil {
					return err
				}
				if a.asJSON {
					return a.printJSON(ps)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tVERSION\tENTRY\tMODULE\tSIZE\tADDED")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", p.Name, p.Version, p.Manifest.Entry, p.ModuleHash[:12], p.Size, p.CreatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
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
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				ts, err := h.Tools(cmd.Context())
				if err != nil {
					return err
				}
				return a.printJSON(ts)
			})
		},
	}
}

func callCmd(a *app) *cobra.Command {
	var input, inputFile, runID string
	var version int
	var noAsk bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "call TOOL [--input JSON]",
		Short: "Call a tool: prints the run id and the result, or what the run waits on",
		Long: `Call starts a run and drives it until it completes, fails, or waits on
something outside it: a question, a timer, a hook. With --wait, it also
fires the run's timers for up to that long, so a short sleep completes.`,
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
			ctx := cmd.Context()
			return a.withHost(ctx, func(h *host.Host) error {
				ri, err := h.Call(ctx, argv[0], raw, &host.CallOptions{RunID: runID, Version: version, NoAsk: noAsk})
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
			})
		},
	}
	c.Flags().StringVar(&input, "input", "", "the tool input, a JSON object")
	c.Flags().StringVar(&inputFile, "input-file", "", "read the tool input from a file")
	c.Flags().StringVar(&runID, "run-id", "", "name the run (default: a random id)")
	c.Flags().IntVar(&version, "version", 0, "plugin version (default: the latest)")
	c.Flags().BoolVar(&noAsk, "no-ask", false, "no person can answer: questions resolve as unavailable")
	c.Flags().DurationVar(&wait, "wait", 0, "fire the run's timers for up to this long")
	return c
}

// waitTimers fires due timers until the run stops waiting on timers or the
// time is up.
func waitTimers(ctx context.Context, h *host.Host, ri host.RunInfo, d time.Duration) (host.RunInfo, error) {
	deadline := time.Now().Add(d)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for !ri.Status.Terminal() && time.Now().Before(deadline) {
		onTimers := ri.Status == store.StatusRunning
		for _, w := range ri.Waiting {
			onTimers = onTimers || w.Kind == "sleep" || w.Kind == "step_retry"
		}
		if !onTimers {
			break
		}
		if _, err := h.FireDue(ctx, time.Now(), quiet); err != nil {
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

func printRun(w io.Writer, ri host.RunInfo) {
	fmt.Fprintf(w, "run %s  tool %s v%d\n", ri.ID, ri.Tool, ri.Version)
	fmt.Fprintf(w, "status: %s\n", ri.Status)
	switch {
	case ri.Status == store.StatusCompleted:
		fmt.Fprintf(w, "result: %s\n", ri.Result)
	case ri.Status == store.StatusFailed && ri.Error != nil:
		fmt.Fprintf(w, "error: %s: %s\n", ri.Error.Type, ri.Error.Message)
	}
	if len(ri.Progress) > 0 && !ri.Status.Terminal() {
		fmt.Fprintf(w, "progress: %s\n", ri.Progress)
	}
	if ri.Stalled != "" {
		fmt.Fprintf(w, "stalled: %s\n", ri.Stalled)
	}
	if len(ri.Waiting) > 0 {
		fmt.Fprintln(w, "waiting on:")
		for _, wt := range ri.Waiting {
			switch wt.Kind {
			case "ask":
				fmt.Fprintf(w, "  question %s: %q\n    answer: sandflow asks answer %s OPTION (or --text TEXT)\n", wt.AskID, firstLine(wt.Prompt), wt.AskID)
			case "sleep":
				fmt.Fprintf(w, "  timer until %s (in %s)\n", wt.Until.Format(time.RFC3339), time.Until(*wt.Until).Round(time.Second))
			case "hook":
				fmt.Fprintf(w, "  hook %s\n    resume: sandflow hooks resume %s --payload JSON\n", wt.Token, wt.Token)
			case "webhook":
				fmt.Fprintf(w, "  webhook %s (served by sandflow serve --http)\n", wt.URL)
			case "step":
				fmt.Fprintf(w, "  step %s (attempt %d, running)\n", wt.Step, wt.Attempt)
			case "step_retry":
				fmt.Fprintf(w, "  step %s retry at %s\n", wt.Step, wt.Until.Format(time.RFC3339))
			}
		}
	}
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
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				runs, err := h.Runs(cmd.Context(), store.RunFilter{Status: store.RunStatus(status), Tool: tool, Limit: limit})
				if err != nil {
					return err
				}
				if a.asJSON {
					return a.printJSON(runs)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tTOOL\tVERSION\tSTATUS\tEVENTS\tCREATED")
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", r.ID, r.Tool, r.Version, r.Status, r.LastSeq, r.CreatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
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
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				ri, err := h.Run(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				evs, err := h.Events(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
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
			})
		},
	}

	var outPath string
	export := &cobra.Command{
		Use:   "export RUN [-o FILE]",
		Short: "Write a run's history as one zstd-compressed file (default RUN.history.zst)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				path := outPath
				if path == "" {
					path = argv[0] + ".history.zst"
				}
				var buf bytes.Buffer
				if err := h.ExportHistory(cmd.Context(), argv[0], &buf); err != nil {
					return err
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(a.out, "wrote %s (%d bytes)\n", path, buf.Len())
				return nil
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
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				ri, err := h.Cancel(cmd.Context(), argv[0], reason)
				if err != nil {
					return err
				}
				if a.asJSON {
					return a.printJSON(ri)
				}
				printRun(a.out, ri)
				return nil
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
		Short: "List open questions, oldest first",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withHostRO(cmd.Context(), func(h *host.Host) error {
				qs, err := h.Questions(cmd.Context(), !all)
				if err != nil {
					return err
				}
				if a.asJSON {
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
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				ri, err := h.AnswerAsk(cmd.Context(), argv[0], ans)
				if err != nil && ri.ID == "" {
					return err
				}
				if rerr := a.report(ri); rerr != nil {
					return rerr
				}
				return err
			})
		},
	}
	answer.Flags().StringVar(&text, "text", "", "answer with text")
	withdraw := &cobra.Command{
		Use:   "withdraw QUESTION",
		Short: "Withdraw a question: it resolves as cancelled, and its run continues",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				ri, err := h.WithdrawAsk(cmd.Context(), argv[0])
				if err != nil && ri.ID == "" {
					return err
				}
				if rerr := a.report(ri); rerr != nil {
					return rerr
				}
				return err
			})
		},
	}
	c.AddCommand(list, answer, withdraw)
	return c
}

func hooksCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "hooks", Short: "Resume hooks"}
	var payload string
	resume := &cobra.Command{
		Use:   "resume TOKEN [--payload JSON]",
		Short: "Send a payload to the hook holding TOKEN and continue its run",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withHost(cmd.Context(), func(h *host.Host) error {
				ri, err := h.ResumeHook(cmd.Context(), argv[0], json.RawMessage(payload))
				if err != nil && ri.ID == "" {
					return err
				}
				if rerr := a.report(ri); rerr != nil {
					return rerr
				}
				return err
			})
		},
	}
	resume.Flags().StringVar(&payload, "payload", "null", "the payload, JSON")
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
				if wasm != nil && jsprogram.IsScript(wasm) {
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
