package proto

import "time"

// Limits bound one program. The zero value of a field means its default
// (DefaultLimits).
type Limits struct {
	// SourceBytes bounds the program's source (256 KiB).
	SourceBytes int `json:"sourceBytes"`
	// ScriptBytes bounds an authored tool's script (4 MiB).
	ScriptBytes int `json:"scriptBytes"`
	// ValueBytes bounds the return value and each ctx.agent input, as
	// JSON (1 MiB).
	ValueBytes int `json:"valueBytes"`
	// ValueDepth bounds how deeply those values nest (1000).
	ValueDepth int `json:"valueDepth"`
	// ReplyBytes bounds a child's reply as JSON (4 MiB).
	ReplyBytes int `json:"replyBytes"`
	// JSTime bounds the time the program computes in one start or resume
	// (30 s). Time spent on the host's side of an op, and time waiting for
	// children, does not count.
	JSTime time.Duration `json:"jsTime"`
	// TotalTime bounds one start or resume from end to end (5 min).
	TotalTime time.Duration `json:"totalTime"`
	// MemoryBytes bounds the heap of the worker running the program
	// (512 MiB).
	MemoryBytes int64 `json:"memoryBytes"`
	// StackDepth bounds the JavaScript call depth (2000 frames).
	StackDepth int `json:"stackDepth"`
	// MaxSubagents is how many ctx.agent calls a run may make: 1-128 (100).
	MaxSubagents int `json:"maxSubagents"`
	// OutputBytes bounds console output per start or resume (1 MiB).
	OutputBytes int `json:"outputBytes"`
	// InFlightBytes bounds what one start or resume carries between the
	// program and the host (256 MiB): its ops' payloads, ctx.agent inputs
	// among them, and their answers, the replies. A start or resume
	// replays the run from the top, so this is every call the run has
	// made so far, and it bounds the host's memory for the program, not
	// only the worker's.
	InFlightBytes int64 `json:"inFlightBytes"`
}

// DefaultLimits are the limits a program gets unless the tool sets others.
var DefaultLimits = Limits{
	SourceBytes:  256 << 10,
	ScriptBytes:  4 << 20,
	ValueBytes:   1 << 20,
	ValueDepth:   1000,
	ReplyBytes:   4 << 20,
	JSTime:       30 * time.Second,
	TotalTime:    5 * time.Minute,
	MemoryBytes:  512 << 20,
	StackDepth:   2000,
	MaxSubagents: 100,
	OutputBytes:  1 << 20,

	InFlightBytes: 256 << 20,
}

// MaxSubagentsCap is the largest maxSubagents a workflow tool may have.
const MaxSubagentsCap = 128

// WithDefaults is l with d's fields for its zero fields (d is
// DefaultLimits, or the host's jsprogram.DefaultLimits, which its
// program may have changed).
func WithDefaults(l, d Limits) Limits {
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.SourceBytes, d.SourceBytes)
	set(&l.ScriptBytes, d.ScriptBytes)
	set(&l.ValueBytes, d.ValueBytes)
	set(&l.ValueDepth, d.ValueDepth)
	set(&l.ReplyBytes, d.ReplyBytes)
	set(&l.StackDepth, d.StackDepth)
	set(&l.MaxSubagents, d.MaxSubagents)
	set(&l.OutputBytes, d.OutputBytes)
	if l.JSTime <= 0 {
		l.JSTime = d.JSTime
	}
	if l.TotalTime <= 0 {
		l.TotalTime = d.TotalTime
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.InFlightBytes <= 0 {
		l.InFlightBytes = d.InFlightBytes
	}
	return l
}
