package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// Sentinel errors of the host. Compare with errors.Is; the typed errors
// below match the sentinel of their class through Is.
var (
	// ErrUnknownTool is returned when no plugin registers the tool name.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrBadInput is returned when a tool input is not a JSON object or fails
	// the tool's input schema (see *InputError).
	ErrBadInput = errors.New("invalid tool input")
	// ErrRunExists is returned when a caller-supplied run id is taken.
	ErrRunExists = errors.New("run id already exists")
	// ErrRunNotFound is returned when no run has the id.
	ErrRunNotFound = errors.New("run not found")
	// ErrRunEnded is returned when an operation needs a run that is still
	// going, and it has completed, failed or been cancelled.
	ErrRunEnded = errors.New("run has ended")
	// ErrUnknownAsk is returned when no question has the id.
	ErrUnknownAsk = errors.New("unknown question")
	// ErrAskClosed is returned when a question was already answered or
	// withdrawn: each question is answered once.
	ErrAskClosed = errors.New("question is no longer open")
	// ErrBadAnswer is returned when an answer matches no option of its
	// question, or is text for a question that allows none.
	ErrBadAnswer = errors.New("answer does not fit the question")
	// ErrUnknownHook is returned when no live run holds the hook token.
	ErrUnknownHook = errors.New("unknown hook token")
	// ErrBadPlugin is returned when a plugin upload is refused; the
	// *PluginError says why. It is plugins.ErrBadPlugin.
	ErrBadPlugin = plugins.ErrBadPlugin
	// ErrBadManifest is returned when a plugin manifest is invalid. It is
	// plugins.ErrBadManifest.
	ErrBadManifest = plugins.ErrBadManifest
	// ErrNonDeterminism is matched by *NonDeterminismError.
	ErrNonDeterminism = errors.New("non-deterministic workflow")
	// ErrResultDiffers is matched by *ResultDiffersError: a replay check's
	// guest made the recorded ops and completed, but with another result
	// or error than the history records.
	ErrResultDiffers = errors.New("replay result differs from the history")
	// ErrLimit is matched by every *LimitError (engine.ErrLimit).
	ErrLimit = engine.ErrLimit
	// ErrCPULimit is matched by a *LimitError for CPU time.
	ErrCPULimit = engine.ErrCPULimit
	// ErrMemoryLimit is matched by a *LimitError for memory.
	ErrMemoryLimit = engine.ErrMemoryLimit
	// ErrGuest is matched by *GuestError: the guest trapped, exited, or
	// broke the ABI.
	ErrGuest = engine.ErrGuest
	// ErrInstanceLost is returned by an engine's Call on an instance it
	// no longer holds (engine.ErrInstanceLost); the host replays.
	ErrInstanceLost = engine.ErrInstanceLost
	// ErrBadHistory is returned when a history file cannot be read.
	ErrBadHistory = history.ErrBadHistory
	// ErrPluginInUse is returned when deleting a plugin version a run that
	// has not ended is pinned to.
	ErrPluginInUse = errors.New("plugin version in use")
	// ErrCompileTimeout is matched by the *PluginError returned when a
	// module did not compile within Options.CompileTimeout. It is
	// plugins.ErrCompileTimeout.
	ErrCompileTimeout = plugins.ErrCompileTimeout
	// ErrClosed is returned by calls on a closed Host.
	ErrClosed = errors.New("host is closed")
	// ErrLeaseLost is returned by a call whose host lost the run's lease
	// while it drove the run (it stalled past the lease, and another host
	// took the run over): the host stopped at its next commit, which was
	// not applied. It is store.ErrLeaseLost. Retry the call; the run goes
	// on on the host that holds it.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrLeaseHeld is returned by a call on a run another host is driving
	// (its lease stayed held past Options.LeaseWait). It is
	// store.ErrLeaseHeld. Retry the call.
	ErrLeaseHeld = store.ErrLeaseHeld
	// ErrStepInterrupted is matched by *StepInterruptedError, and by a
	// *RunError of a run that failed on a step attempt cut off.
	ErrStepInterrupted = errors.New("step attempt interrupted")
)

// OpRef names an op at a position of a run's op sequence.
type OpRef struct {
	Kind abi.OpKind
	Name string
	// Activation is the activation (0-based) the op was issued in.
	Activation int
}

func (r OpRef) String() string {
	if r.Kind == 0 {
		return "nothing"
	}
	if r.Name != "" {
		return fmt.Sprintf("%s %q", r.Kind, r.Name)
	}
	return r.Kind.String()
}

// NonDeterminismError is returned when a guest, replaying a run's history,
// asks for something other than what the history recorded at that point.
// The run is left as it was.
type NonDeterminismError struct {
	RunID string
	// Position is the op position (1-based) where guest and history part.
	Position uint32
	// Expected is what the history recorded there; Kind 0 when the history
	// has no op there.
	Expected OpRef
	// Actual is what the guest asked for; Kind 0 when it asked for nothing
	// more (it suspended or completed).
	Actual OpRef
	// Detail says how they differ when kind and name alone do not.
	Detail string
}

func (e *NonDeterminismError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "non-deterministic workflow: run %s at op position %d: history has %s, guest asked for %s",
		e.RunID, e.Position, e.Expected, e.Actual)
	if e.Detail != "" {
		b.WriteString(" (")
		b.WriteString(e.Detail)
		b.WriteString(")")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNonDeterminism) true.
func (e *NonDeterminismError) Is(target error) bool { return target == ErrNonDeterminism }

// ResultDiffersError is what a strict replay check makes of a report
// whose Outcome is "differs" (ReplayReport.Strict): the guest replayed
// every recorded op but ended the run otherwise than the history does. It
// matches ErrResultDiffers and, as a divergence from the history, also
// ErrNonDeterminism.
type ResultDiffersError struct {
	RunID string
	// Detail says what the history has and what the guest gave.
	Detail string
}

func (e *ResultDiffersError) Error() string {
	return fmt.Sprintf("replay result differs from the history: run %s: %s", e.RunID, e.Detail)
}

// Is makes errors.Is true for ErrResultDiffers and ErrNonDeterminism.
func (e *ResultDiffersError) Is(target error) bool {
	return target == ErrResultDiffers || target == ErrNonDeterminism
}

// The error types engines return live in package host/engine; the host
// returns them too, under these names.
type (
	// LimitError is returned when a run or an upload goes over a limit.
	LimitError = engine.LimitError
	// GuestError is returned when a guest traps, exits, or breaks the ABI.
	GuestError = engine.GuestError
)

// InputError is returned when a tool input fails the tool's input schema.
type InputError struct {
	Tool string
	// Problems lists each failed check as "location: message".
	Problems []string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("invalid input for tool %s: %s", e.Tool, strings.Join(e.Problems, "; "))
}

// Is makes errors.Is(err, ErrBadInput) true.
func (e *InputError) Is(target error) bool { return target == ErrBadInput }

// PluginError is returned when a plugin upload is refused: Reason is a
// stable code, Detail says why.
//
// Deprecated: the type is plugins.PluginError; this name stays for one
// release.
type PluginError = plugins.PluginError

// RunError is the error a failed run ended with, as the guest or the host
// reported it. It carries the stable type string and retryable flag that
// crossed the guest boundary.
type RunError struct {
	Type      string
	Message   string
	Retryable bool
}

func (e *RunError) Error() string { return e.Type + ": " + e.Message }

// Is matches ErrCPULimit and ErrMemoryLimit (and ErrLimit) for runs that
// failed on those limits, and ErrGuest for runs whose guest trapped.
func (e *RunError) Is(target error) bool {
	switch target {
	case ErrCPULimit:
		return e.Type == abi.ErrTypeCPULimit
	case ErrMemoryLimit:
		return e.Type == abi.ErrTypeMemoryLimit
	case ErrLimit:
		return e.Type == abi.ErrTypeCPULimit || e.Type == abi.ErrTypeMemoryLimit || e.Type == abi.ErrTypeTooLarge || e.Type == "LimitError"
	case ErrGuest:
		return e.Type == abi.ErrTypeTrap
	case ErrStepInterrupted:
		return e.Type == abi.ErrTypeStepInterrupted
	}
	return false
}

// StepInterruptedError is a step attempt that began and was cut off
// before it reported how it ended (abi.ErrTypeStepInterrupted). The log
// records it as the attempt's failure, and the step's retry policy
// decides whether another attempt follows. The attempt's side effects may
// have happened: a step should dedupe them by its step id.
type StepInterruptedError struct {
	Step    string // the step's name
	Attempt int
	// Cause is one of abi.InterruptCrashed, InterruptHostClosed,
	// InterruptHostStopped, InterruptCancelled, InterruptRunEnded.
	Cause string
}

func (e *StepInterruptedError) Error() string {
	return fmt.Sprintf("step %s: attempt %d was interrupted (%s) before it ended", e.Step, e.Attempt, e.Cause)
}

// Is makes errors.Is(err, ErrStepInterrupted) true.
func (e *StepInterruptedError) Is(target error) bool { return target == ErrStepInterrupted }

// Object is the error object the attempt's step_failed event records.
func (e *StepInterruptedError) Object() *abi.ErrorObject {
	return &abi.ErrorObject{Type: abi.ErrTypeStepInterrupted, Message: e.Error(), Retryable: true,
		Details: mustJSON(abi.StepInterrupted{Cause: e.Cause, Attempt: e.Attempt})}
}

// AsStepInterrupted reads an error object (a step_failed event's, a
// failed run's) as the interruption it records, if it is one.
func AsStepInterrupted(eo *abi.ErrorObject, step string) (*StepInterruptedError, bool) {
	if eo == nil || eo.Type != abi.ErrTypeStepInterrupted {
		return nil, false
	}
	var d abi.StepInterrupted
	if json.Unmarshal(eo.Details, &d) != nil || d.Cause == "" || d.Attempt < 1 {
		return nil, false
	}
	return &StepInterruptedError{Step: step, Attempt: d.Attempt, Cause: d.Cause}, true
}

func errorObject(err error) *abi.ErrorObject {
	var le *LimitError
	var ge *GuestError
	switch {
	case errors.As(err, &le):
		return &abi.ErrorObject{Type: le.ErrorType(), Message: le.Error()}
	case errors.As(err, &ge):
		if ge.Object != nil {
			o := *ge.Object
			return &o
		}
		return &abi.ErrorObject{Type: abi.ErrTypeTrap, Message: ge.Error()}
	}
	return &abi.ErrorObject{Type: abi.ErrTypeError, Message: err.Error()}
}
