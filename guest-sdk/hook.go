package sandflow

import (
	"encoding/json"
	"fmt"

	"github.com/sandflow/sandflow/abi"
)

// HookOptions configures CreateHook.
type HookOptions struct {
	// Token is the token that resumes the hook; empty means a random one.
	// Give a fixed token when something outside must find the hook later.
	Token string
	// Metadata is stored with the hook.
	Metadata any
}

// Hook receives payloads sent to its token (the host's resumeHook), in
// order. It is disposed when the run ends.
type Hook[T any] struct {
	id       uint32
	token    string
	conflict string
}

// CreateHook registers a hook for payloads of type T.
func CreateHook[T any](ctx *Context, opts HookOptions) (*Hook[T], error) {
	req := abi.HookRequest{Token: opts.Token}
	if opts.Metadata != nil {
		b, err := json.Marshal(opts.Metadata)
		if err != nil {
			return nil, err
		}
		req.Metadata = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r := doOp(abi.OpHookCreate, "", b)
	if r.status != abi.StatusOK {
		return nil, decodeError(r.payload)
	}
	var hc abi.HookCreated
	if err := json.Unmarshal(r.payload, &hc); err != nil {
		return nil, fmt.Errorf("sandflow: bad hook_create answer: %w", err)
	}
	return &Hook[T]{id: r.future, token: hc.Token, conflict: hc.Conflict}, nil
}

// Token returns the token that resumes the hook.
func (h *Hook[T]) Token() string { return h.token }

// Conflict returns the id of the run that already held the token when the
// hook was created, or "". A conflicted hook receives nothing: Next
// rejects with a HookConflictError.
func (h *Hook[T]) Conflict() string { return h.conflict }

// Next returns a future for the hook's next payload.
func (h *Hook[T]) Next(ctx *Context) *Future[T] {
	return newFuture[T](doOp(abi.OpHookNext, "", []byte(fmt.Sprintf(`{"hook":%d}`, h.id))))
}

// Dispose releases the token so another run can use it.
func (h *Hook[T]) Dispose(ctx *Context) error {
	r := doOp(abi.OpHookDispose, "", []byte(fmt.Sprintf(`{"hook":%d}`, h.id)))
	if r.status != abi.StatusOK {
		return decodeError(r.payload)
	}
	return nil
}
