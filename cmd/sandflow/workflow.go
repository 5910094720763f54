package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// agentsFile is the --agents file: scripted agents, for trying the
// workflow tool and for tests without a model behind it.
//
//	{"agents": [{"name": "ticket-triage", "description": "...",
//	             "reply": "triaged: {message}", "data": {...}, "delayMs": 100,
//	             "fail": "why it fails"}]}
//
// reply is a template ({message} is the message sent); data is the
// structured output a call with outputSchema gets; fail makes every turn
// fail with that message.
type agentsFile struct {
	Agents []scriptedAgent `json:"agents"`
}

type scriptedAgent struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Reply       string          `json:"reply,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
	DelayMs     int             `json:"delayMs,omitempty"`
	Fail        string          `json:"fail,omitempty"`
}

func loadAgents(path string) (host.AgentBackend, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--agents: %w", err)
	}
	var f agentsFile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, withCode(exitInvalid, fmt.Errorf("--agents %s: %w", path, err))
	}
	byName := map[string]scriptedAgent{}
	list := make([]host.AgentInfo, 0, len(f.Agents))
	for _, a := range f.Agents {
		if a.Name == "" {
			return nil, withCode(exitInvalid, fmt.Errorf("--agents %s: an agent has no name", path))
		}
		if _, dup := byName[a.Name]; dup {
			return nil, withCode(exitInvalid, fmt.Errorf("--agents %s: agent %q is listed twice", path, a.Name))
		}
		byName[a.Name] = a
		list = append(list, host.AgentInfo{Name: a.Name, Description: a.Description})
	}
	return host.AgentFunc{List: list, Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
		a := byName[t.Agent]
		if a.DelayMs > 0 {
			select {
			case <-time.After(time.Duration(a.DelayMs) * time.Millisecond):
			case <-ctx.Done():
				return abi.AgentResult{}, ctx.Err()
			}
		}
		if a.Fail != "" {
			return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: abi.AgentErrFailed, Message: a.Fail}}, nil
		}
		res := abi.AgentResult{Status: abi.AgentCompleted, Reply: strings.ReplaceAll(a.Reply, "{message}", t.Message)}
		if len(t.OutputSchema) > 0 {
			res.Data = a.Data
		}
		return res, nil
	}}, nil
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
			return a.withHost(c.Context(), func(h *host.Host) error {
				var agents []host.AgentInfo
				if a.agents != nil {
					var err error
					if agents, err = a.agents.Agents(c.Context()); err != nil {
						return err
					}
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
