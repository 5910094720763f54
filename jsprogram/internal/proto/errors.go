package proto

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/sandflow/sandflow/abi"
)

// ErrorType is the type of the error object a failed program's run ends
// with; its details carry a Code.
const ErrorType = "WorkflowProgramError"

// AgentErrorName is the name of the error ctx.agent throws; it carries a
// code too (one of the Code constants or an abi.AgentErr code).
const AgentErrorName = "WorkflowProgramAgentError"

// Codes of a WorkflowProgramError, one per way a program fails. A caught
// WorkflowProgramAgentError that is rethrown keeps its own code (one of
// CodeInvalidCall, CodeInputTooLarge, CodeMaxSubagents, CodeReplyTooLarge,
// or an abi.AgentErr code for a failed child turn).
const (
	// CodeSyntaxError: the source does not parse as a function body.
	CodeSyntaxError = "syntax_error"
	// CodeSourceTooLarge: the source is over Limits.SourceBytes.
	CodeSourceTooLarge = "source_too_large"
	// CodeUncaught: the program threw (or rejected) and nothing caught it.
	CodeUncaught = "uncaught_exception"
	// CodeStackOverflow: the program recursed past Limits.StackDepth.
	CodeStackOverflow = "stack_overflow"
	// CodeJSTime: the program computed longer than Limits.JSTime in one
	// start or resume.
	CodeJSTime = "js_time_limit"
	// CodeTotalTime: one start or resume took longer than Limits.TotalTime.
	CodeTotalTime = "total_time_limit"
	// CodeMemory: the program's worker went over Limits.MemoryBytes.
	CodeMemory = "memory_limit"
	// CodeWorkerCrashed: the worker died for another reason, or broke the
	// protocol with the host: a fault of the engine, not of the program
	// (its message carries what the worker said last).
	CodeWorkerCrashed = "worker_crashed"
	// CodeInFlight: one start or resume carried more than
	// Limits.InFlightBytes between the program and the host (ctx.agent
	// inputs and replies: for a fan-out, the replies of every call).
	CodeInFlight = "in_flight_limit"
	// CodeOutputTooLarge: the return value is over Limits.ValueBytes as
	// JSON.
	CodeOutputTooLarge = "output_too_large"
	// CodeOutputTooDeep: the return value nests deeper than
	// Limits.ValueDepth.
	CodeOutputTooDeep = "output_too_deep"
	// CodeNotSerializable: JSON.stringify threw on the return value (a
	// cycle, a BigInt).
	CodeNotSerializable = "output_not_serializable"
	// CodePendingAtReturn: a ctx.agent call was still pending when the
	// program returned (never awaited, or lost a race).
	CodePendingAtReturn = "pending_call_at_return"
	// CodeNeverSettles: the program waits on something that is not a
	// ctx.agent call, so it can never continue.
	CodeNeverSettles = "program_never_settles"

	// CodeNoDefinition: a tool script never called defineWorkflowTool.
	CodeNoDefinition = "no_definition"
	// CodeTooManyPending: an authored tool waits on more operations at
	// once than an await can name.
	CodeTooManyPending = "too_many_pending"

	// Codes of WorkflowProgramAgentError besides abi.AgentErr ones.

	// CodeInvalidCall: ctx.agent was called with bad arguments.
	CodeInvalidCall = "invalid_call"
	// CodeInputTooLarge: a ctx.agent input is over Limits.ValueBytes as
	// JSON (or nests deeper than Limits.ValueDepth).
	CodeInputTooLarge = "input_too_large"
	// CodeMaxSubagents: the call is over the tool's maxSubagents budget.
	CodeMaxSubagents = "max_subagents"
	// CodeReplyTooLarge: a child's reply is over Limits.ReplyBytes as JSON.
	CodeReplyTooLarge = abi.AgentErrReplyTooLarge
)

// WorkflowProgramError is why a program failed, as the run's error object
// carries it: Type ErrorType, Message, and Details holding the rest.
type WorkflowProgramError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Line and Column locate the error in the submitted source, from 1;
	// 0 when unknown.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// Name is the JavaScript error's name (TypeError, ...), if any.
	Name string `json:"name,omitempty"`
	// Stack is the JavaScript stack, with positions in the submitted
	// source.
	Stack string `json:"stack,omitempty"`
}

func (e *WorkflowProgramError) Error() string {
	return e.Message + " [" + e.Code + "]"
}

// LimitHit names the limit that stopped the program ("js_time",
// "total_time", "memory", "in_flight", "output", "pending", "subagents",
// "input", "source"), or "" when no limit did: the host's Observer counts
// it (host.GuestError.Limit).
func (e *WorkflowProgramError) LimitHit() string {
	return map[string]string{CodeJSTime: "js_time", CodeTotalTime: "total_time", CodeMemory: "memory",
		CodeInFlight: "in_flight", CodeOutputTooLarge: "output", CodeTooManyPending: "pending",
		CodeMaxSubagents: "subagents", CodeInputTooLarge: "input", CodeSourceTooLarge: "source"}[e.Code]
}

// Object is the error object a run fails with.
func (e *WorkflowProgramError) Object() *abi.ErrorObject {
	d := struct {
		Code   string `json:"code"`
		Line   int    `json:"line,omitempty"`
		Column int    `json:"column,omitempty"`
		Name   string `json:"name,omitempty"`
		Stack  string `json:"stack,omitempty"`
	}{e.Code, e.Line, e.Column, e.Name, e.Stack}
	raw, _ := json.Marshal(d)
	return &abi.ErrorObject{Type: ErrorType, Message: e.Message, Details: raw}
}

// FromObject reads a WorkflowProgramError back from a run's error object;
// ok is false for an error object of another type.
func FromObject(eo *abi.ErrorObject) (*WorkflowProgramError, bool) {
	if eo == nil || eo.Type != ErrorType {
		return nil, false
	}
	e := &WorkflowProgramError{Message: eo.Message}
	if len(eo.Details) > 0 {
		_ = json.Unmarshal(eo.Details, e)
	}
	e.Message = eo.Message
	return e, true
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("... [%d bytes cut]", len(s)-i)
}
