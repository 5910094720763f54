package proto

import "encoding/json"

// WorkerEnv marks a process started as a worker.
const WorkerEnv = "SANDFLOW_JS_WORKER"

// MemoryEnv passes the worker its heap limit in bytes.
const MemoryEnv = "SANDFLOW_JS_MEMORY"

// Exit codes of a worker; the parent reads them with the tail of stderr.
const (
	ExitOK       = 0
	ExitProtocol = 3
	ExitMemory   = 4
)

// Kinds of activation (activation.Kind).
const (
	KindProgram = ""         // a workflow tool's program: the source is the input's js
	KindTool    = "workflow" // a start or resume of an authored tool's run
	KindStep    = "step"     // one step attempt of an authored tool
	KindDefine  = "define"   // read an authored tool's definition
)

// ActivationNoun names what an activation of kind runs, for messages.
func ActivationNoun(kind string) string {
	switch kind {
	case KindStep:
		return "step attempt"
	case KindDefine:
		return "load of the script"
	}
	return "start or resume"
}

// Definition is what a tool script defines with defineWorkflowTool.
type Definition struct {
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	// Entry is execute, task or serve.
	Entry string `json:"entry"`
	// Steps are the script's "use step" functions, in source order.
	Steps []string `json:"steps,omitempty"`
}

// Activation is what a worker needs to run one start or resume.
type Activation struct {
	// Kind is what to run: a workflow tool's program (""), or an authored
	// tool's workflow activation, step attempt or definition.
	Kind string `json:"kind,omitempty"`
	// Source is an authored tool's script, and Name its tool: the stack
	// of a run's error names the script NAME.js (the program's own stacks
	// say tool.js).
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Seed seeds Math.random; the host draws it from the run's generator.
	Seed []byte `json:"seed"`
	// Now is the logical clock at the start, unix ns.
	Now    int64  `json:"now"`
	Limits Limits `json:"limits"`
	// Park: a workflow program that waits for calls still out parks
	// (sends 'S' and stays live) instead of ending the activation.
	Park bool `json:"park,omitempty"`
	// Log: the run's log follows in an 'L' frame, to replay from.
	Log bool `json:"log,omitempty"`
}

// Done ends an activation.
type Done struct {
	// Status is "completed" (the program issued complete), "aborted" (the
	// parent sent 'K', or an op failed) or "failed" (a limit the worker
	// caught; Error says which), or "defined".
	Status string                `json:"status"`
	Error  *WorkflowProgramError `json:"error,omitempty"`
	// Definition answers a define activation (status "defined").
	Definition *Definition `json:"definition,omitempty"`
}
