package jsprogram

import (
	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/jsprogram/internal/proto"
)

// The errors a program fails with. They are defined with the wire
// messages that carry them between a worker and the host
// (internal/proto); these are the names callers use.

// WorkflowProgramError is why a program failed, as the run's error object
// carries it: Type ErrorType, Message, and Details holding the rest.
type WorkflowProgramError = proto.WorkflowProgramError

// ErrorType is the type of the error object a failed program's run ends
// with; its details carry a Code.
const ErrorType = proto.ErrorType

// AgentErrorName is the name of the error ctx.agent throws; it carries a
// code too (one of the Code constants or an abi.AgentErr code).
const AgentErrorName = proto.AgentErrorName

// FromObject reads a WorkflowProgramError back from a run's error object;
// ok is false for an error object of another type.
func FromObject(eo *abi.ErrorObject) (*WorkflowProgramError, bool) { return proto.FromObject(eo) }

// Codes of a WorkflowProgramError, one per way a program fails, each
// documented where it is defined. A caught WorkflowProgramAgentError that
// is rethrown keeps its own code (one of CodeInvalidCall,
// CodeInputTooLarge, CodeMaxSubagents, CodeReplyTooLarge, or an
// abi.AgentErr code for a failed child turn).
const (
	CodeSyntaxError     = proto.CodeSyntaxError
	CodeSourceTooLarge  = proto.CodeSourceTooLarge
	CodeUncaught        = proto.CodeUncaught
	CodeStackOverflow   = proto.CodeStackOverflow
	CodeJSTime          = proto.CodeJSTime
	CodeTotalTime       = proto.CodeTotalTime
	CodeMemory          = proto.CodeMemory
	CodeWorkerCrashed   = proto.CodeWorkerCrashed
	CodeInFlight        = proto.CodeInFlight
	CodeOutputTooLarge  = proto.CodeOutputTooLarge
	CodeOutputTooDeep   = proto.CodeOutputTooDeep
	CodeNotSerializable = proto.CodeNotSerializable
	CodePendingAtReturn = proto.CodePendingAtReturn
	CodeNeverSettles    = proto.CodeNeverSettles
	CodeNoDefinition    = proto.CodeNoDefinition
	CodeTooManyPending  = proto.CodeTooManyPending
	CodeInvalidCall     = proto.CodeInvalidCall
	CodeInputTooLarge   = proto.CodeInputTooLarge
	CodeMaxSubagents    = proto.CodeMaxSubagents
	CodeReplyTooLarge   = proto.CodeReplyTooLarge
)
