package sandflow

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Step is a step defined with DefineStep: a function with side effects
// whose result is recorded, so replay never runs it again.
type Step[In, Out any] struct {
	name      string
	retry     *abi.RetryPolicy
	retryJSON []byte
}

// StepOption changes a step's retry policy.
type StepOption func(*abi.RetryPolicy)

// MaxAttempts sets how many attempts a step gets, the first included; 1
// turns retries off. The default is 3.
func MaxAttempts(n int) StepOption { return func(p *abi.RetryPolicy) { p.MaxAttempts = n } }

// Backoff sets the delay before the second attempt, its cap, and the
// factor it grows by (defaults 1s, 1m, 2).
func Backoff(initial, max time.Duration, factor float64) StepOption {
	return func(p *abi.RetryPolicy) {
		p.InitialBackoffMs, p.MaxBackoffMs, p.BackoffFactor = initial.Milliseconds(), max.Milliseconds(), factor
	}
}

type stepRunner func(sc *StepContext, input []byte) (json.RawMessage, *abi.ErrorObject)

var steps = map[string]stepRunner{}

// DefineStep defines a step by a name unique in the module. Define steps
// at package level: the host runs each attempt in a separate instance of
// the module and finds the function by name there.
func DefineStep[In, Out any](name string, fn func(sc *StepContext, in In) (Out, error), opts ...StepOption) *Step[In, Out] {
	if _, dup := steps[name]; dup {
		panic(fmt.Sprintf("sandflow: step %q is defined twice", name))
	}
	warmCodec[In]()
	warmCodec[Out]()
	steps[name] = func(sc *StepContext, input []byte) (json.RawMessage, *abi.ErrorObject) {
		var in In
		if err := decodeTyped(input, &in); err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("step %s: decoding input: %v", name, err)}
		}
		out, err := fn(sc, in)
		if err != nil {
			return nil, errorObject(err)
		}
		b, err := appendTyped(nil, out)
		if err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("step %s: encoding result: %v", name, err)}
		}
		return b, nil
	}
	s := &Step[In, Out]{name: name}
	if len(opts) > 0 {
		s.retry = &abi.RetryPolicy{}
		for _, o := range opts {
			o(s.retry)
		}
		s.retryJSON, _ = json.Marshal(s.retry)
	}
	return s
}

// Name returns the step's name.
func (s *Step[In, Out]) Name() string { return s.name }

// Start schedules the step and returns a future for its result; the step
// runs once the body waits.
func (s *Step[In, Out]) Start(ctx *Context, in In) *Future[Out] {
	return s.start(in, 0)
}

// start issues the step op; with abi.OpFlagAwait the host also waits for
// it, saving the separate await.
func (s *Step[In, Out]) start(in In, flags abi.OpKind) *Future[Out] {
	r, encErr := s.issue(in, flags)
	return s.futureOf(r, encErr)
}

// issue sends the step op, returning the host's response and the input's
// encoding error, if any.
func (s *Step[In, Out]) issue(in In, flags abi.OpKind) (response, error) {
	// The input is encoded on replay too, though the host answers from the
	// log without reading it: encoding can draw from the Go runtime's
	// hidden random generator (map iteration, first use of a type), and
	// the body's own map order and math/rand must not depend on whether
	// this is a replay. The payload is built in a buffer the next op reuses.
	//
	// Except an input whose encoding cannot draw or allocate: an integer
	// or a bool, whose payload fits stepBuf as it is. The op is first sent
	// without it, with the if-recorded flag: on replay the host answers
	// from the log, and the encoding (a good part of a replayed step's
	// time in the guest) is skipped; live, the host answers StatusLive,
	// having recorded nothing, and the op goes again with its payload.
	if s.scalarInput(&in) {
		if r := doOp(abi.OpStep|flags|abi.OpFlagIfRecorded, s.name, nil); r.status != abi.StatusLive {
			return r, nil
		}
	}
	return s.send(in, flags)
}

// scalarInput reports whether the step can be issued without its input
// first (issue).
func (s *Step[In, Out]) scalarInput(in *In) bool {
	return len(s.retryJSON)+maxScalarPayload <= cap(stepBuf) && fixedScalar(in)
}

// send sends the step op with its input.
func (s *Step[In, Out]) send(in In, flags abi.OpKind) (response, error) {
	payload := append(stepBuf[:0], `{"input":`...)
	payload, encErr := appendTyped(payload, in)
	if encErr != nil {
		// Still issue the op, with a payload the host refuses, so it takes
		// its position as it will on replay.
		payload = append(payload[:0], unencodable...)
	} else {
		if s.retry != nil {
			payload = append(payload, `,"retry":`...)
			payload = append(payload, s.retryJSON...)
		}
		payload = append(payload, '}')
	}
	stepBuf = payload
	return doOp(abi.OpStep|flags, s.name, payload), encErr
}

func (s *Step[In, Out]) futureOf(r response, encErr error) *Future[Out] {
	f := newFuture[Out](r)
	if encErr != nil {
		f.err = &Error{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("step %s: encoding input: %v", s.name, encErr)}
	}
	return f
}

// stepBuf holds step payloads: the host reads them during the op. Its
// first capacity takes any payload of a fixedScalar input (issue).
var stepBuf = make([]byte, 0, 256)

// maxScalarPayload bounds a step payload of a fixedScalar input, besides
// its retry policy: {"input":-9223372036854775808,"retry":…}.
const maxScalarPayload = len(`{"input":-9223372036854775808,"retry":}`)

// fixedScalar reports whether *v is of a type appendTyped encodes with
// neither allocation nor encoding/json, in a bounded number of bytes.
func fixedScalar[T any](v *T) bool {
	switch any(v).(type) {
	case *int, *int64, *bool:
		return true
	}
	return false
}

// Run runs the step and waits for its result.
//
// It does what Start and Await do, without making a future: the result is
// decoded into a local whether the step settled at once (as on replay) or
// after the run suspended (live), so a run allocates the same live and on
// replay, which keeps the Go runtime's hidden state (heap sampling draws
// from its generator) the same on both.
func (s *Step[In, Out]) Run(ctx *Context, in In) (Out, error) {
	var r response
	var encErr error
	if s.scalarInput(&in) {
		// issue, with its first try made here: one Go call fewer for
		// every replayed step, where a call costs tens of nanoseconds.
		r = doOp(abi.OpStep|abi.OpFlagAwait|abi.OpFlagIfRecorded, s.name, nil)
		if r.status == abi.StatusLive {
			r, encErr = s.send(in, abi.OpFlagAwait)
		}
	} else {
		r, encErr = s.send(in, abi.OpFlagAwait)
	}
	var out Out
	switch {
	case encErr != nil || r.status == abi.StatusPending:
		return s.futureOf(r, encErr).Await(ctx)
	case r.status == abi.StatusOK:
		if p, ok := any(&out).(*int); ok {
			// A replayed step's integer result, without settleInto's
			// calls: each costs tens of nanoseconds in a guest.
			if n, ok := plainInt(r.payload); ok {
				*p = int(n)
				return out, nil
			}
		}
		err := settleInto(r.payload, &out)
		return out, err
	case r.status == abi.StatusSuspend:
		// The host waited and the run must suspend; then wait again.
		suspend()
		st, v := awaitSettled(r.future)
		if st == abi.FutureRejected {
			return out, decodeError(v)
		}
		err := settleInto(v, &out)
		return out, err
	}
	return out, decodeError(r.payload) // rejected or refused
}

// StepContext is a step attempt's handle.
type StepContext struct {
	in abi.StepInput
}

// StepID is the step's id, the same for every attempt and unique across
// runs: use it as an idempotency key for the side effect.
func (sc *StepContext) StepID() string { return sc.in.StepID }

// Attempt is the attempt number, from 1.
func (sc *StepContext) Attempt() int { return sc.in.Attempt }

// RunID is the run the step belongs to.
func (sc *StepContext) RunID() string { return sc.in.RunID }

// Metadata returns the run's metadata, with the step id.
func (sc *StepContext) Metadata() Metadata {
	var m Metadata
	_ = json.Unmarshal(doOp(abi.OpMetadata, "", nil).payload, &m)
	return m
}

// Aborted reports whether the run has been aborted (JavaScript's
// abortSignal: a task_cancel, a cancelled or failed turn, the end of the
// session, a steer) since the step was called, and why: a long step can
// check it and stop early. An abort before the call does not count; the
// body knows of it (Signal). It asks the host each time.
func (sc *StepContext) Aborted() (AbortInfo, bool) {
	r := doOp(abi.OpStepAborted, "", nil)
	var a abi.StepAborted
	if r.status != abi.StatusOK || json.Unmarshal(r.payload, &a) != nil || !a.Aborted {
		return AbortInfo{}, false
	}
	return AbortInfo{Reason: a.Reason}, true
}

// Call calls a host capability by name with a JSON-encodable input and
// decodes its result. Capabilities may only be called from steps, and only
// those the plugin's manifest lists.
func Call[Out any](sc *StepContext, capability string, in any) (Out, error) {
	var out Out
	b, err := json.Marshal(in)
	if err != nil {
		return out, err
	}
	r := doOp(abi.OpCall, capability, b)
	if r.status != abi.StatusOK {
		return out, decodeError(r.payload)
	}
	if err := json.Unmarshal(r.payload, &out); err != nil {
		return out, fmt.Errorf("sandflow: decoding the result of capability %s: %w", capability, err)
	}
	return out, nil
}

func runStep() int32 {
	var in abi.StepInput
	if raw := doOp(abi.OpStepInput, "", nil).payload; !decodeStepInput(raw, &in) {
		if err := json.Unmarshal(raw, &in); err != nil {
			panic("sandflow: bad step input from host: " + err.Error())
		}
	}
	var res json.RawMessage
	var eo *abi.ErrorObject
	if fn := steps[in.Name]; fn == nil {
		eo = &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("this module defines no step %q", in.Name)}
	} else {
		res, eo = callStep(fn, &StepContext{in: in}, in.Input)
	}
	r := doOp(abi.OpStepComplete, "", outcome(res, eo))
	if r.status != abi.StatusOK {
		r = doOp(abi.OpStepComplete, "", outcome(nil, errorObject(decodeError(r.payload))))
		if r.status != abi.StatusOK {
			panic("sandflow: the host refused a step outcome: " + string(r.payload))
		}
	}
	return abi.RunDone
}

func callStep(fn stepRunner, sc *StepContext, input []byte) (res json.RawMessage, eo *abi.ErrorObject) {
	defer func() {
		if r := recover(); r != nil {
			res, eo = nil, &abi.ErrorObject{Type: "Panic", Message: fmt.Sprintf("panic: %v\n%s", r, debug.Stack())}
		}
	}()
	return fn(sc, input)
}

// Fetch is an HTTP request through the host's built-in http.fetch
// capability: from a step, to a host the plugin's manifest lists in
// httpAllow (and with http.fetch in its capabilities).
func Fetch(sc *StepContext, req FetchRequest) (FetchResponse, error) {
	return Call[FetchResponse](sc, abi.CapabilityFetch, req)
}

// Fetch's request and response.
type (
	FetchRequest  = abi.FetchRequest
	FetchResponse = abi.FetchResponse
)
