package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

func demoCmd(a *app) *cobra.Command {
	var keep bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "Build the example tools from source, call them, answer their questions, print their timelines",
		Long: `Demo builds the example guests in examples/ with the Go toolchain
(GOOS=wasip1), registers them in a fresh data directory, and runs them:
deploy waits for a person, who approves; remind sleeps durably; and
approve-deadline races its question against a deadline, pages on-call
when the deadline passes, and deploys once approved; and the loop agent
assistant, whose model is scripted on a local port (no network), calls
remind as a tool and answers with its result. It prints each run's
timeline. Run it from the repository.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp("", "sandflow-demo-")
			if err != nil {
				return err
			}
			// Hints name the data directory only when it outlives the demo.
			hints := ""
			if keep {
				fmt.Fprintf(a.out, "data directory: %s (kept)\n", dir)
				hints = "sandflow --data " + dir
			} else {
				defer os.RemoveAll(dir)
			}
			return runDemo(cmd.Context(), a.out, dir, hints)
		},
	}
	c.Flags().BoolVar(&keep, "keep", false, "keep the demo's data directory and print where it is")
	return c
}

// runDemo runs the demo in dir; the runs it prints carry hints naming the
// command hints ("" for none: the directory is deleted after).
func runDemo(ctx context.Context, out io.Writer, dir, hints string) error {
	root, err := guestbuild.RepoRoot()
	if err != nil {
		return fmt.Errorf("the demo builds the examples from source: %w", err)
	}
	// The loop agent's model: scripted, on a local port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	model := &http.Server{Handler: &agents.ScriptedModel{Steps: []agents.ScriptedModelStep{
		{ToolCalls: []agents.ScriptedToolCall{{Name: "remind", Arguments: `{"note":"stretch your legs","delay":"1s"}`}}},
		{Text: "Done, the reminder came back: {result}"},
	}}}
	go model.Serve(ln)
	defer model.Close()
	loop := &agents.Loop{Endpoint: agents.Endpoint{BaseURL: "http://" + ln.Addr().String() + "/v1", APIKeyEnv: "SANDFLOW_DEMO_NO_KEY"}, Model: "scripted",
		List: []agents.LoopAgent{{Name: "assistant", Description: "sets reminders", Instructions: "Set the reminders you are asked for.", Tools: []agents.LoopTool{{Tool: "remind"}}}}}
	h, err := host.OpenDir(ctx, dir, &host.Options{Agents: loop, Engines: map[string]host.Engine{agents.LoopEngineName: loop.Engine()}})
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	say("== building the example tools from source (GOOS=wasip1 GOARCH=wasm)")
	say("   (the first build compiles Go's standard library for wasip1 too: a few minutes on a cold cache)")
	names := []string{"deploy", "remind", "approve-deadline"}
	for i, name := range names {
		t0 := time.Now()
		say("   [%d/%d] building %s ...", i+1, len(names), name)
		src := filepath.Join(root, "examples", name)
		wasmPath, err := guestbuild.Build(src)
		if err != nil {
			return err
		}
		wasm, err := os.ReadFile(wasmPath)
		if err != nil {
			return err
		}
		raw, err := os.ReadFile(filepath.Join(src, "manifest.json"))
		if err != nil {
			return err
		}
		m, err := host.ParseManifest(raw)
		if err != nil {
			return err
		}
		p, err := h.AddPlugin(ctx, wasm, m)
		if err != nil {
			return err
		}
		say("   [%d/%d] %-17s %d KiB, module %s, built and compiled in %s", i+1, len(names), p.Name, len(wasm)>>10, p.ModuleHash[:12], time.Since(t0).Round(time.Millisecond))
	}

	say("\n== deploy: plan, ask a person, apply")
	ri, err := h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), nil)
	if err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	if ri.Status != store.StatusWaiting || len(ri.Waiting) == 0 || ri.Waiting[0].AskID == "" {
		return fmt.Errorf("deploy should wait on its question, but is %s", ri.Status)
	}
	say("-- a person reads the plan and approves (question %s, option approve)", ri.Waiting[0].AskID)
	if ri, err = h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: "approve"}); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	deployRun := ri.ID

	say("\n== remind: progress, then a durable 2s sleep")
	if ri, err = h.Call(ctx, "remind", json.RawMessage(`{"note":"stretch your legs","delay":"2s"}`), nil); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	say("-- the scheduler fires the timer")
	if ri, err = schedulerUntil(ctx, h, ri.ID, func(ri host.RunInfo) bool { return ri.Status.Terminal() }, 30*time.Second); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	remindRun := ri.ID

	say("\n== approve-deadline: a question raced against a 1s deadline, escalation, a second race")
	if ri, err = h.Call(ctx, "approve-deadline", json.RawMessage(`{"service":"web","firstDeadline":"1s","secondDeadline":"1h"}`), nil); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	say("-- nobody answers; the first deadline passes and on-call is paged")
	paged := func(ri host.RunInfo) bool {
		for _, w := range ri.Waiting {
			if w.Kind == "sleep" && w.Until.Sub(ri.CreatedAt) > 30*time.Minute {
				return true
			}
		}
		return ri.Status.Terminal()
	}
	if ri, err = schedulerUntil(ctx, h, ri.ID, paged, 30*time.Second); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	var askID string
	for _, w := range ri.Waiting {
		if w.Kind == "ask" {
			askID = w.AskID
		}
	}
	if askID == "" {
		return fmt.Errorf("approve-deadline should still wait on its question, but is %s", ri.Status)
	}
	say("-- on-call approves (question %s, option approve)", askID)
	if ri, err = h.AnswerAsk(ctx, askID, host.Answer{OptionID: "approve"}); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	deadlineRun := ri.ID

	say("\n== assistant: a loop agent's turn, a run of its own; its model (scripted) calls remind as a tool")
	if err := loop.Attach(ctx, h); err != nil {
		return err
	}
	if ri, err = h.Start(ctx, agents.LoopToolName("assistant"), json.RawMessage(`{"message":"remind me to stretch in a second"}`), nil); err != nil {
		return err
	}
	go h.Drive(ctx, ri.ID)
	say("-- each model call is a step, the tool call a run of remind; the scheduler fires its timer")
	if ri, err = schedulerUntil(ctx, h, ri.ID, func(ri host.RunInfo) bool { return ri.Status.Terminal() }, 30*time.Second); err != nil {
		return err
	}
	printRunWith(out, ri, hints)
	loopRun := ri.ID

	for _, id := range []string{deployRun, remindRun, deadlineRun, loopRun} {
		evs, err := h.Events(ctx, id)
		if err != nil {
			return err
		}
		say("\n== timeline of %s", id)
		printTimeline(out, evs)
	}
	return nil
}

// schedulerUntil runs the scheduler until the run satisfies done.
func schedulerUntil(ctx context.Context, h *host.Host, runID string, done func(host.RunInfo) bool, limit time.Duration) (host.RunInfo, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	deadline := time.Now().Add(limit)
	for {
		ri, err := h.Run(ctx, runID)
		if err != nil || done(ri) {
			return ri, err
		}
		if time.Now().After(deadline) {
			return ri, fmt.Errorf("run %s did not get there within %s", runID, limit)
		}
		if _, err := h.FireDue(ctx, time.Now(), quiet); err != nil {
			return ri, err
		}
		select {
		case <-ctx.Done():
			return ri, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
