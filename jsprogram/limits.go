package jsprogram

import "github.com/sandflow/sandflow/jsprogram/internal/proto"

// Limits bound one program. The zero value of a field means its default
// (DefaultLimits). The worker that runs the program enforces them, and
// the type is defined with the messages that carry it there
// (internal/proto).
type Limits = proto.Limits

// DefaultLimits are the limits a program gets unless the tool sets others.
var DefaultLimits = proto.DefaultLimits

// MaxSubagentsCap is the largest maxSubagents a workflow tool may have.
const MaxSubagentsCap = proto.MaxSubagentsCap
