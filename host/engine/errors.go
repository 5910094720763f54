package engine

import (
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/plugins"

	"github.com/sandflow/sandflow/abi"
)

// Sentinel errors of engines. Compare with errors.Is; the typed errors
// below match the sentinel of their class through Is. The host package
// re-exports them under the same names.
var (
	// ErrLimit is matched by every *LimitError.
	ErrLimit = errors.New("limit exceeded")
	// ErrCPULimit is matched by a *LimitError for CPU time.
	ErrCPULimit = errors.New("CPU time limit exceeded")
	// ErrMemoryLimit is matched by a *LimitError for memory.
	ErrMemoryLimit = errors.New("memory limit exceeded")
	// ErrGuest is matched by *GuestError: the guest trapped, exited, or
	// broke the ABI.
	ErrGuest = errors.New("guest failed")
	// ErrBadPlugin is matched by *PluginError: a module (or plugin) is
	// refused. It is plugins.ErrBadPlugin.
	ErrBadPlugin = plugins.ErrBadPlugin
	// ErrCompileTimeout is matched by the *PluginError returned when a
	// module did not compile in time. It is plugins.ErrCompileTimeout.
	ErrCompileTimeout = plugins.ErrCompileTimeout
	// ErrSnapshot is returned when an instance's state cannot be read or
	// restored as a snapshot asks (a memory that cannot grow to its size,
	// another number of globals).
	ErrSnapshot = errors.New("snapshot not restorable")
	// ErrInstanceLost is returned by Call on an instance whose state the
	// engine no longer holds: one kept live between calls outside the
	// host's process (a JavaScript program parked in its worker) that
	// was evicted, or whose process died. Nothing of the call reached the
	// host's ops that must be kept; the host runs the activation again on
	// a new instance, which replays.
	ErrInstanceLost = errors.New("instance lost")
)

// LimitError is returned when a run or an upload goes over a limit.
type LimitError struct {
	// Limit is "cpu", "memory", "payload", "events", "output" or "module".
	Limit string
	// Max is the limit's value, in its unit (ms, bytes or events).
	Max int64
	// What the limit applied to, for the message.
	What string
}

func (e *LimitError) Error() string {
	unit := map[string]string{"cpu": "ms", "memory": "bytes", "payload": "bytes", "output": "bytes", "module": "bytes", "events": "events"}[e.Limit]
	s := fmt.Sprintf("%s limit of %d %s exceeded", e.Limit, e.Max, unit)
	if e.What != "" {
		s = e.What + ": " + s
	}
	return s
}

// Is matches ErrLimit, and ErrCPULimit or ErrMemoryLimit by kind.
func (e *LimitError) Is(target error) bool {
	switch target {
	case ErrLimit:
		return true
	case ErrCPULimit:
		return e.Limit == "cpu"
	case ErrMemoryLimit:
		return e.Limit == "memory"
	}
	return false
}

// ErrorType returns the abi error type for the limit.
func (e *LimitError) ErrorType() string {
	switch e.Limit {
	case "cpu":
		return abi.ErrTypeCPULimit
	case "memory":
		return abi.ErrTypeMemoryLimit
	case "payload":
		return abi.ErrTypeTooLarge
	}
	return "LimitError"
}

// GuestError is returned when a guest traps, exits, or breaks the ABI.
type GuestError struct {
	// ExitCode is set when the guest exited through proc_exit.
	ExitCode *uint32
	Message  string
	// Object, when set, is the error object the run fails with (an engine
	// that knows better than "trap", such as the JavaScript one, sets it).
	Object *abi.ErrorObject
	// Limit, when set, names the limit that stopped the guest, in the
	// engine's own words ("js_time", say): the host's Observer counts it.
	Limit string
}

func (e *GuestError) Error() string {
	if e.ExitCode != nil {
		return fmt.Sprintf("guest exited with code %d: %s", *e.ExitCode, e.Message)
	}
	return "guest failed: " + e.Message
}

// Is makes errors.Is(err, ErrGuest) true.
func (e *GuestError) Is(target error) bool { return target == ErrGuest }

// PluginError is returned when a plugin upload is refused; an engine's
// Compile returns one with Reason "compile". It is plugins.PluginError, the
// one type every layer of admission returns.
type PluginError = plugins.PluginError
