package sandflow

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Error is an error that crosses the guest boundary: it keeps a stable Type
// for code, a Message for people, and whether it may be retried.
type Error struct {
	Type       string
	Message    string
	Retryable  bool
	RetryAfter time.Duration
	// Details is any JSON-encodable value; on an error that crossed the
	// boundary it is a json.RawMessage.
	Details any
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// Is matches another *Error of the same Type, so
// errors.Is(err, &sandflow.Error{Type: "FatalError"}) tests the type.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Type == e.Type && (t.Message == "" || t.Message == e.Message)
}

// Well-known error types.
const (
	TypeFatal        = abi.ErrTypeFatal
	TypeRetryable    = abi.ErrTypeRetryable
	TypeHookConflict = abi.ErrTypeHookConflict
	TypeHookDisposed = abi.ErrTypeHookDisposed
	TypeTooLarge     = abi.ErrTypeTooLarge
)

// FatalError fails a step at once, without retries.
func FatalError(msg string) error { return &Error{Type: abi.ErrTypeFatal, Message: msg} }

// RetryableError retries a step; after, when positive, sets the delay
// before the next attempt.
func RetryableError(msg string, after time.Duration) error {
	return &Error{Type: abi.ErrTypeRetryable, Message: msg, Retryable: true, RetryAfter: after}
}

// ErrorType returns the Type of err if it is an *Error, else "".
func ErrorType(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Type
	}
	return ""
}

func errorObject(err error) *abi.ErrorObject {
	var e *Error
	if errors.As(err, &e) {
		eo := &abi.ErrorObject{Type: e.Type, Message: e.Message, Retryable: e.Retryable, RetryAfterMs: e.RetryAfter.Milliseconds()}
		if e.Details != nil {
			eo.Details, _ = json.Marshal(e.Details)
		}
		return eo
	}
	return &abi.ErrorObject{Type: abi.ErrTypeError, Message: err.Error()}
}

func decodeError(b []byte) *Error {
	var eo abi.ErrorObject
	if err := json.Unmarshal(b, &eo); err != nil || eo.Type == "" {
		return &Error{Type: abi.ErrTypeError, Message: string(b)}
	}
	e := &Error{Type: eo.Type, Message: eo.Message, Retryable: eo.Retryable, RetryAfter: time.Duration(eo.RetryAfterMs) * time.Millisecond}
	if len(eo.Details) > 0 {
		e.Details = eo.Details
	}
	return e
}

// decodeError returns *Error; these keep the error interface for callers.
var _ error = (*Error)(nil)
