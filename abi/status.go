package abi

import (
	"encoding/json"
	"strconv"
)

// Status is the first u32 of every op response body.
type Status uint32

const (
	// StatusOK: the op succeeded. For an op that makes a future, the future
	// is already fulfilled and the payload is its value.
	StatusOK Status = 0
	// StatusPending: the op made a future that is not settled yet; the future
	// id is in the header and the payload is empty.
	StatusPending Status = 1
	// StatusRejected: the op's future is already rejected; the payload is an
	// error object.
	StatusRejected Status = 2
	// StatusSuspend answers an OpAwait that cannot be satisfied now. The
	// guest must return RunSuspended from RunExport without issuing another
	// op; the host calls RunExport again when something the guest waits on
	// may have settled, and the guest repeats the await.
	StatusSuspend Status = 3
	// StatusLive answers an op sent with OpFlagIfRecorded that the history
	// does not have: nothing was recorded; send the op again, with its
	// payload and without the flag.
	StatusLive Status = 4

	// Codes from 16 up are refusals; the payload is an error object that
	// says what was wrong, and nothing was recorded.

	// StatusBadRequest: the op's name or payload is malformed.
	StatusBadRequest Status = 16
	// StatusUnknownOp: the kind is not an op of this ABI version.
	StatusUnknownOp Status = 17
	// StatusNotAllowed: the op may not be issued in this context, such as a
	// capability call outside a step.
	StatusNotAllowed Status = 18
	// StatusNotFound: a future, hook or capability named by the op does not
	// exist.
	StatusNotFound Status = 19
	// StatusTooLarge: the payload or the value it would record is over a
	// limit.
	StatusTooLarge Status = 20
	// StatusFailed: a capability call failed; the payload is its error.
	StatusFailed Status = 21
)

var statusNames = map[Status]string{
	StatusOK:         "ok",
	StatusPending:    "pending",
	StatusRejected:   "rejected",
	StatusSuspend:    "suspend",
	StatusLive:       "live",
	StatusBadRequest: "bad_request",
	StatusUnknownOp:  "unknown_op",
	StatusNotAllowed: "not_allowed",
	StatusNotFound:   "not_found",
	StatusTooLarge:   "too_large",
	StatusFailed:     "failed",
}

// String returns the wire name of the status.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "status(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// IsRefusal reports whether s refuses the op rather than answering it.
func (s Status) IsRefusal() bool { return s >= StatusBadRequest }

// Error types carried in the "type" field of an error object. A guest may
// use any other type string for its own errors; these are the ones the host
// and the SDKs give meaning to.
const (
	// ErrTypeFatal stops a step without a retry.
	ErrTypeFatal = "FatalError"
	// ErrTypeRetryable retries a step, after "retryAfterMs" when it is set.
	ErrTypeRetryable = "RetryableError"
	// ErrTypeError is the type of an error that named no type.
	ErrTypeError = "Error"
	// ErrTypeTrap is a step attempt whose guest trapped or exited.
	ErrTypeTrap = "TrapError"
	// ErrTypeCPULimit is a step attempt that ran past its CPU time limit.
	ErrTypeCPULimit = "CPULimitError"
	// ErrTypeMemoryLimit is a step attempt that grew past its memory limit.
	ErrTypeMemoryLimit = "MemoryLimitError"
	// ErrTypeTooLarge is a value over a payload limit.
	ErrTypeTooLarge = "PayloadTooLargeError"
	// ErrTypeHookConflict rejects the payloads of a hook whose token another
	// run holds.
	ErrTypeHookConflict = "HookConflictError"
	// ErrTypeHookDisposed rejects a wait on a disposed hook.
	ErrTypeHookDisposed = "HookDisposedError"
	// ErrTypeCapability is a failed capability call.
	ErrTypeCapability = "CapabilityError"
	// ErrTypeBadRequest is a refused op.
	ErrTypeBadRequest = "BadRequestError"
	// ErrTypeOutputSchema fails a run whose body completed with a result
	// that does not match its tool's outputSchema; the run_failed event
	// keeps the result.
	ErrTypeOutputSchema = "OutputSchemaError"
	// ErrTypeStepInterrupted is a step attempt that began and did not
	// report how it ended: the host that ran it crashed, closed or stopped
	// driving the run, or the run was cancelled. Its details are a
	// StepInterrupted. It is retried per the policy like any failure.
	ErrTypeStepInterrupted = "StepInterruptedError"
)

// Causes of a StepInterruptedError.
const (
	// InterruptCrashed: the host that began the attempt ended without
	// recording how it ended (a crash, a kill, a lost machine); the next
	// host to drive the run records it.
	InterruptCrashed = "crashed"
	// InterruptHostClosed: the host was closed while the attempt ran.
	InterruptHostClosed = "host_closed"
	// InterruptHostStopped: the host stopped driving the run while the
	// attempt ran: the context of the call, drive or scheduler that drove
	// it ended.
	InterruptHostStopped = "host_stopped"
	// InterruptCancelled: the run was cancelled while the attempt ran.
	InterruptCancelled = "cancelled"
	// InterruptRunEnded: the run ended (completed or failed) while the
	// attempt ran, so its outcome no longer counts.
	InterruptRunEnded = "run_ended"
)

// StepInterrupted is the details of a StepInterruptedError: why the
// attempt was cut off, and which attempt it was.
type StepInterrupted struct {
	Cause   string `json:"cause"`
	Attempt int    `json:"attempt"`
}

// ErrorObject is the JSON shape of an error that crosses the boundary, in
// either direction. Type is stable and meant for code; Message is for people.
type ErrorObject struct {
	Type         string `json:"type"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
	// Details is any JSON value the thrower attached, kept as it was sent.
	Details json.RawMessage `json:"details,omitempty"`
}
