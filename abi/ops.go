package abi

import "strconv"

// OpKind identifies an op in FuncOp's kind parameter. The numeric values are
// the wire values; the names returned by String are the wire names used in
// logs, histories and error messages.
type OpKind uint32

const (
	// OpInput returns the tool input (a JSON object). Workflow context.
	OpInput OpKind = 1
	// OpMetadata returns the run's metadata as JSON. Both contexts.
	OpMetadata OpKind = 2
	// OpComplete ends the run with {"result": v} or {"error": e}. Recorded.
	OpComplete OpKind = 3
	// OpProgress publishes a progress snapshot (any JSON value). Recorded.
	OpProgress OpKind = 4
	// OpStep schedules a step; name is the step name and the payload is
	// {"input": v, "retry": {...}}. Returns a future. Recorded.
	OpStep OpKind = 5
	// OpSleep sets a durable timer: {"ms": n} or {"until": unix_ms}.
	// Returns a future that fulfils with null. Recorded.
	OpSleep OpKind = 6
	// OpAsk opens a question for a person. Returns a future that fulfils
	// with the answer. Recorded.
	OpAsk OpKind = 7
	// OpHookCreate registers a hook: {"token"?: s, "metadata"?: v}. Answers
	// at once with the hook's id as the future field and
	// {"token": s, "conflict": run_id|null}. Recorded.
	OpHookCreate OpKind = 8
	// OpHookNext returns a future for the hook's next payload: {"hook": id}.
	// Recorded.
	OpHookNext OpKind = 9
	// OpHookDispose releases a hook's token: {"hook": id}. Recorded.
	OpHookDispose OpKind = 10
	// OpAwait waits for futures. The payload is binary: u32 AwaitMode, then
	// u32 future ids. Not recorded; answered from the log.
	OpAwait OpKind = 11
	// OpStepInput returns the step attempt a step instance must run. Step
	// context.
	OpStepInput OpKind = 12
	// OpStepComplete reports a step attempt: {"result": v} or {"error": e}.
	// Step context.
	OpStepComplete OpKind = 13
	// OpCall calls a capability by name with a JSON payload. Step context
	// only: capabilities are side effects, and side effects belong in steps.
	OpCall OpKind = 14
	// OpWebhookRespond answers a request a manual webhook received:
	// {"hook": id, "request": index, "status": n, "headers"?: {...},
	// "body"?: s}. Recorded.
	OpWebhookRespond OpKind = 15
	// OpAgent sends a message to an agent in a new session and makes a
	// future for that turn's result: name is the agent, the payload an
	// AgentRequest. Recorded; the host runs the turn outside the guest.
	OpAgent OpKind = 16
	// OpReceive makes a future for a serve body's next call, a ServeCall:
	// the call that started the run first, then each call sent to the run
	// (its task), in order. Recorded.
	OpReceive OpKind = 17
	// OpReply answers the calls the body has received and not yet
	// answered (payload: a ReplyRequest), and withdraws the run's open
	// questions when it answers any. Answers at once with a ReplyResult; a
	// reply with no call waiting answers none. Only a serve tool's run may
	// receive and reply. Recorded.
	OpReply OpKind = 18
	// OpSignal makes a future that fulfils with an AbortInfo when the run
	// is next aborted (cancelled with time to unwind): JavaScript's
	// abortSignal. Recorded.
	OpSignal OpKind = 19
	// OpStepAborted reports, in a step attempt, whether the run has been
	// aborted since the step was called, so that a step
	// sees the abort of its run. The body is a StepAborted. Step context
	// only; not recorded (a step's result is).
	OpStepAborted OpKind = 20
	// OpDescribe says what tool the module is (payload: a Description).
	// Issued only from DescribeExport, which the host calls once at upload
	// to check the module against the manifest it comes with; answered with
	// an empty body. Not recorded; refused anywhere else.
	OpDescribe OpKind = 21
)

// OpFlagIfRecorded may be or-ed into the kind of a recorded op. The host
// then answers the op from the log when the history has it, as usual, and
// otherwise answers StatusLive without recording anything or taking a
// position; the guest then issues the op again, without the flag and with
// its payload. A guest sends the payload empty with the flag, so a replay
// never pays to encode payloads the host would not read.
const OpFlagIfRecorded OpKind = 1 << 31

// OpFlagAwait may be or-ed into the kind of an op that makes a future
// (step, sleep, ask, hook_next): the host performs the op and, if its
// future is pending, awaits it at once, as an await of that one future
// would. A satisfied wait answers as the op would have with the future
// settled; an unsatisfied one answers StatusSuspend with the future in the
// header, and the guest, once resumed, awaits that future as usual. It
// saves a host call per op a guest awaits right away.
const OpFlagAwait OpKind = 1 << 30

var opNames = [...]string{
	OpInput:        "input",
	OpMetadata:     "metadata",
	OpComplete:     "complete",
	OpProgress:     "progress",
	OpStep:         "step",
	OpSleep:        "sleep",
	OpAsk:          "ask",
	OpHookCreate:   "hook_create",
	OpHookNext:     "hook_next",
	OpHookDispose:  "hook_dispose",
	OpAwait:        "await",
	OpStepInput:    "step_input",
	OpStepComplete: "step_complete",
	OpCall:         "call",

	OpWebhookRespond: "webhook_respond",
	OpAgent:          "agent",
	OpReceive:        "receive",
	OpReply:          "reply",
	OpSignal:         "signal",
	OpStepAborted:    "step_aborted",
	OpDescribe:       "describe",
}

// String returns the wire name of the op kind, or "op(N)" for an unknown one.
func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return "op(" + strconv.FormatUint(uint64(k), 10) + ")"
}

// Valid reports whether k is an op kind of this ABI version.
func (k OpKind) Valid() bool { return int(k) < len(opNames) && opNames[k] != "" }

// Recorded reports whether an op of this kind takes a position in the run's
// op sequence. Recorded ops are checked on replay: the guest must ask for
// the same kind and name at the same position.
func (k OpKind) Recorded() bool {
	switch k {
	case OpComplete, OpProgress, OpStep, OpSleep, OpAsk, OpHookCreate, OpHookNext, OpHookDispose, OpWebhookRespond, OpAgent,
		OpReceive, OpReply, OpSignal:
		return true
	}
	return false
}

// MakesFuture reports whether the op answers with a future to await.
func (k OpKind) MakesFuture() bool {
	switch k {
	case OpStep, OpSleep, OpAsk, OpHookNext, OpAgent, OpReceive, OpSignal:
		return true
	}
	return false
}

// InWorkflow reports whether the op may be issued from RunExport.
func (k OpKind) InWorkflow() bool {
	switch k {
	case OpStepInput, OpStepComplete, OpCall, OpStepAborted, OpDescribe:
		return false
	}
	return k.Valid()
}

// InStep reports whether the op may be issued from StepExport.
func (k OpKind) InStep() bool {
	switch k {
	case OpStepInput, OpStepComplete, OpCall, OpMetadata, OpStepAborted:
		return true
	}
	return false
}

// OpKindByName returns the op kind with the given wire name.
func OpKindByName(name string) (OpKind, bool) {
	for k, n := range opNames {
		if n == name && n != "" {
			return OpKind(k), true
		}
	}
	return 0, false
}

// AwaitMode is the first u32 of an OpAwait payload.
type AwaitMode uint32

const (
	// AwaitAll is satisfied when every listed future is settled, or as soon
	// as one is rejected.
	AwaitAll AwaitMode = 0
	// AwaitAny is satisfied when at least one listed future is settled.
	AwaitAny AwaitMode = 1
	// AwaitBlock may be or-ed into the mode by a guest that cannot unwind:
	// when the await is not satisfied, the op does not return. The host ends
	// the instance and the run continues later by replay in a fresh one.
	AwaitBlock AwaitMode = 0x100
)

// FutureState is the state of a future in an op or await response.
type FutureState uint32

const (
	FuturePending   FutureState = 0
	FutureFulfilled FutureState = 1
	FutureRejected  FutureState = 2
)

var futureStateNames = [...]string{"pending", "fulfilled", "rejected"}

func (s FutureState) String() string {
	if int(s) < len(futureStateNames) {
		return futureStateNames[s]
	}
	return "state(" + strconv.FormatUint(uint64(s), 10) + ")"
}
