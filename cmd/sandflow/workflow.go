package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// loadAgents reads the --agents file (see package agents): scripted
// agents for trying things offline, OpenAI-compatible ones, and external
// ones the platform runs through the HTTP API's work items.
func loadAgents(ctx context.Context, path string) (*agents.Backends, error) {
	b, err := agents.Load(ctx, path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--agents: %w", err)
		}
		return nil, withCode(exitInvalid, fmt.Errorf("--agents %w", err))
	}
	return b, nil
}

func workflowCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "workflow", Short: "The workflow tool: JavaScript programs a model writes that delegate to agents"}
	var name string
	var maxSubagents int
	enable := &cobra.Command{
		Use:   "enable [--name workflow] [--max-subagents N]",
		Short: "Register the workflow tool (again, to change its budget: a new version)",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("max-subagents") && (maxSubagents < 1 || maxSubagents > jsprogram.MaxSubagentsCap) {
				return &usageError{fmt.Sprintf("--max-subagents must be 1-%d, not %d", jsprogram.MaxSubagentsCap, maxSubagents)}
			}
			if a.agentsPath == "" {
				return &usageError{"workflow enable needs agents for its programs to call: give --agents FILE (env SANDFLOW_AGENTS; examples/agents.json is one)"}
			}
			return a.withHost(c.Context(), func(h *host.Host) error {
				var agents []host.AgentInfo
				if a.agents != nil {
					var err error
					if agents, err = a.agents.Agents(c.Context()); err != nil {
						return err
					}
				}
				if len(agents) == 0 {
					return withCode(exitInvalid, fmt.Errorf("--agents %s lists no agents: a workflow program would have none to call", a.agentsPath))
				}
				p, err := jsprogram.RegisterWorkflowTool(c.Context(), h, jsprogram.WorkflowTool{Name: name, MaxSubagents: maxSubagents, Agents: agents})
				if err != nil {
					return err
				}
				if a.asJSON {
					return a.printJSON(p)
				}
				n := maxSubagents
				if n == 0 {
					n = jsprogram.DefaultLimits.MaxSubagents
				}
				fmt.Fprintf(a.out, "%s version %d: a run may make %d agent calls\n", p.Name, p.Version, n)
				return nil
			})
		},
	}
	enable.Flags().StringVar(&name, "name", jsprogram.WorkflowToolName, "the tool's name")
	enable.Flags().IntVar(&maxSubagents, "max-subagents", 0, fmt.Sprintf("agent calls a run may make, 1-%d (default %d)", jsprogram.MaxSubagentsCap, jsprogram.DefaultLimits.MaxSubagents))
	c.AddCommand(enable)
	return c
}
