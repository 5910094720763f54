// Package sandflow is the Go SDK for sandflow workflow tools compiled to
// WebAssembly (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared).
//
// A tool registers exactly one entry point, Execute or Task, from an init
// function, and defines its steps as package-level variables:
//
//	var plan = sandflow.DefineStep("plan", func(sc *sandflow.StepContext, service string) (Plan, error) {
//		return computePlan(service) // side effects are fine here
//	})
//
//	func init() {
//		sandflow.Execute(func(ctx *sandflow.Context, in Input) (Output, error) {
//			p, err := plan.Run(ctx, in.Service)
//			...
//		})
//	}
//
//	func main() {}
//
// # Determinism
//
// The entry point (the workflow body) runs again from the start after every
// wait and every restart, and each SDK call is answered from the run's log
// until the body reaches new ground. So the body must make the same SDK
// calls in the same order every time, given the same answers. It may use
// time.Now, math/rand, crypto/rand, map iteration and select in the body's
// goroutine: the host supplies time and randomness, and the SDK runs the
// same code live and on replay, so they replay. It must not do I/O or anything whose
// result can change between executions; put that in a step. Steps run in a
// separate instance of the module, their results are recorded, and they
// are never re-run on replay (but an attempt may run again after a crash,
// so make them idempotent: StepContext.StepID is a key for that).
//
// Call the SDK from the goroutine running the entry point only, and use
// futures (Step.Start, Sleep, Ask, Hook.Next with All and Race) for
// concurrency. Goroutines of your own are fine for computation that
// finishes before the body next awaits.
package sandflow

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Context is the workflow body's handle on its run. Only the body gets one.
type Context struct{ _ [0]func() }

// response is a parsed op response; payload aliases the response buffer.
type response struct {
	status  abi.Status
	future  uint32
	payload []byte
}

// parseResponse splits an op's response into its header and payload, as
// doOp does in a guest (abi_wasip1.go).
func parseResponse(kind abi.OpKind, b []byte) response {
	if len(b) < abi.BodyHeaderSize {
		shortResponse(kind, len(b))
	}
	return response{abi.Status(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]), b[abi.BodyHeaderSize:]}
}

// shortResponse panics: the host answered an op without a header.
//
//go:noinline
func shortResponse(kind abi.OpKind, n int) {
	panic(fmt.Sprintf("sandflow: host answered op %s with %d bytes", kind, n))
}

// The entry point and the coroutine that runs it (iter.Pull's, made by
// prepare in warm.go). sandflow_run switches to the body's goroutine and returns when
// the body completes or waits; the next sandflow_run lets the waiting body
// go on. A coroutine switch goes straight from one goroutine to the other,
// where a channel hands off through the scheduler, which costs several
// times more in WebAssembly.
var (
	entry     func(ctx *Context) (json.RawMessage, *abi.ErrorObject)
	entryKind string
	started   bool
	suspended bool
	// bodyNext runs the body until it next yields, and returns what it
	// yielded: abi.RunSuspended or abi.RunDone.
	bodyNext func() (int32, bool)
	// bodyYield, called on the body's goroutine, switches back to
	// sandflow_run's with the value bodyNext returns.
	bodyYield func(int32) bool
)

func register(kind string, fn func(ctx *Context) (json.RawMessage, *abi.ErrorObject)) {
	if entry != nil {
		panic(fmt.Sprintf("sandflow: a tool defines exactly one entry point, and %s is already defined", entryKind))
	}
	entry, entryKind = fn, kind
}

// toolName is what Name declared: the tool this module is.
var toolName string

// Name declares which tool this module is, as its manifest's "name" must
// say. Call it from an init function. The host asks at upload
// (sandflow_describe) and refuses the module with another tool's
// manifest (plugin_manifest_mismatch), where without it the mix-up shows
// only when the tool is called.
func Name(name string) { toolName = name }

// describe issues the describe op, in sandflow_describe.
func describe() int32 {
	if toolName == "" {
		return 0
	}
	b, err := json.Marshal(abi.Description{Name: toolName})
	if err != nil {
		panic(err)
	}
	if r := doOp(abi.OpDescribe, "", b); r.status != abi.StatusOK {
		panic(fmt.Sprintf("sandflow: the host refused the describe op: %s", r.status))
	}
	return 0
}

// Execute registers the tool's entry point for a call the caller waits on.
// Call it once, from an init function.
func Execute[In, Out any](fn func(ctx *Context, in In) (Out, error)) { register("execute", wrap(fn)) }

// Task registers the tool's entry point for a call that runs as a task:
// the caller gets a receipt at once and the result later. Call it once,
// from an init function.
func Task[In, Out any](fn func(ctx *Context, in In) (Out, error)) { register("task", wrap(fn)) }

func wrap[In, Out any](fn func(ctx *Context, in In) (Out, error)) func(ctx *Context) (json.RawMessage, *abi.ErrorObject) {
	warmCodec[In]()
	warmCodec[Out]()
	return func(ctx *Context) (json.RawMessage, *abi.ErrorObject) {
		var in In
		r := doOp(abi.OpInput, "", nil)
		if err := decodeTyped(r.payload, &in); err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "decoding the tool input: " + err.Error()}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, errorObject(err)
		}
		if b, ok := appendStruct(nil, out); ok { // json.Marshal's bytes
			return b, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "encoding the result: " + err.Error()}
		}
		return b, nil
	}
}

func run() int32 {
	if !started {
		started = true
		if entry == nil {
			complete(nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "the tool defines no entry point: call sandflow.Execute or sandflow.Task from an init function"})
			return abi.RunDone
		}
	}
	prepare()
	v, ok := bodyNext()
	if !ok {
		// Only runtime.Goexit on the body's goroutine ends the coroutine
		// (body never returns), and iter.Pull passes it on to this one.
		panic("sandflow: the workflow body's goroutine exited")
	}
	return v
}

func body() {
	res, eo := callEntry()
	complete(res, eo)
	bodyYield(abi.RunDone)
	// The run is over, and the host resets or closes the instance. The
	// goroutine waits for good rather than exit: exiting would free its
	// grown stack, work every run would do at its end for nothing.
	select {}
}

func callEntry() (res json.RawMessage, eo *abi.ErrorObject) {
	defer func() {
		if r := recover(); r != nil {
			res, eo = nil, &abi.ErrorObject{Type: "Panic", Message: fmt.Sprintf("panic: %v\n%s", r, debug.Stack())}
		}
	}()
	return entry(&Context{})
}

func complete(res json.RawMessage, eo *abi.ErrorObject) {
	r := doOp(abi.OpComplete, "", outcome(res, eo))
	if r.status == abi.StatusOK {
		return
	}
	// The host refused the result (too large, say): fail with its reason.
	r = doOp(abi.OpComplete, "", outcome(nil, errorObject(decodeError(r.payload))))
	if r.status != abi.StatusOK {
		panic("sandflow: the host refused to complete the run: " + string(r.payload))
	}
}

func outcome(res json.RawMessage, eo *abi.ErrorObject) []byte {
	if eo == nil {
		if len(res) == 0 {
			return []byte(`{}`)
		}
		b := make([]byte, 0, len(res)+11)
		b = append(b, `{"result":`...)
		b = append(b, res...)
		return append(b, '}')
	}
	b, err := json.Marshal(abi.Outcome{Error: eo})
	if err != nil {
		panic(err)
	}
	return b
}

// suspend hands control back to the host until it resumes the run.
func suspend() {
	if suspended {
		panic("sandflow: two goroutines are waiting at once; call the SDK from the workflow body's goroutine only")
	}
	suspended = true
	bodyYield(abi.RunSuspended)
	suspended = false
}

// settleable is a future of any type.
type settleable interface {
	futureID() uint32
	isDone() bool
	settle(state abi.FutureState, value []byte)
}

// Awaitable is any future, for All and Race.
type Awaitable interface{ settleable }

// Future is a value that will be there later: a step's result, a timer, an
// answer, a hook payload. Its methods are for the workflow body.
type Future[T any] struct {
	id   uint32
	done bool
	err  error
	val  T
}

func newFuture[T any](r response) *Future[T] {
	f := &Future[T]{id: r.future}
	switch r.status {
	case abi.StatusPending:
	case abi.StatusSuspend:
		// An op sent with the await flag whose future is not settled: the
		// host waited and the run must suspend; Await waits again after.
		suspend()
	case abi.StatusOK:
		f.settle(abi.FutureFulfilled, r.payload)
	default: // rejected or refused
		f.done, f.err = true, decodeError(r.payload)
	}
	return f
}

func failedFuture[T any](err error) *Future[T] { return &Future[T]{done: true, err: err} }

func (f *Future[T]) futureID() uint32 { return f.id }
func (f *Future[T]) isDone() bool     { return f.done }

// settle takes the future's value; v aliases the response buffer, so it is
// decoded (which copies) right away.
func (f *Future[T]) settle(st abi.FutureState, v []byte) {
	f.done = true
	if st == abi.FutureRejected {
		f.err = decodeError(v)
		return
	}
	f.err = settleInto(v, &f.val)
}

// settleInto decodes a fulfilled future's value into dst and notes a
// ServeCall received. dst does not escape: a step run at once decodes into
// a local (Step.Run).
func settleInto[T any](v []byte, dst *T) error {
	if err := decodeTyped(v, dst); err != nil {
		return &Error{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("decoding a %T: %v", *dst, err)}
	}
	switch any(dst).(type) {
	case *int, *int64, *bool, *string, *float64, *json.RawMessage:
		// Not a ServeCall: spares the interface check, a lookup on every
		// settle of a scalar.
	default:
		if _, ok := any(dst).(receivedCall); ok {
			c := new(T) // a copy: a call through the interface would move dst to the heap
			*c = *dst
			any(c).(receivedCall).noteReceived()
		}
	}
	return nil
}

// Done reports whether the future has settled, as far as the body knows.
func (f *Future[T]) Done() bool { return f.done }

// Await waits for the future and returns its value or error. A wait holds
// no compute: the run is suspended until the future settles.
func (f *Future[T]) Await(ctx *Context) (T, error) {
	if !f.done {
		awaitOne(f)
	}
	return f.val, f.err
}

// All waits until every future has settled, or one is rejected, and
// returns the first rejection in argument order.
func All(ctx *Context, fs ...Awaitable) error {
	ss := make([]settleable, len(fs))
	for i, f := range fs {
		ss[i] = f
	}
	awaitFutures(abi.AwaitAll, ss)
	for _, f := range fs {
		if f.isDone() {
			if e := futureErr(f); e != nil {
				return e
			}
		}
	}
	return nil
}

// Race waits until at least one future has settled and returns the index
// of the first settled one in argument order, with its error if it was
// rejected. When several have settled by then, argument order decides,
// which is what makes a race replay the same way.
func Race(ctx *Context, fs ...Awaitable) (int, error) {
	if len(fs) == 0 {
		return -1, errors.New("sandflow: Race of no futures")
	}
	for i, f := range fs {
		if f.isDone() {
			return i, futureErr(f)
		}
	}
	ss := make([]settleable, len(fs))
	for i, f := range fs {
		ss[i] = f
	}
	awaitFutures(abi.AwaitAny, ss)
	for i, f := range fs {
		if f.isDone() {
			return i, futureErr(f)
		}
	}
	panic("sandflow: the host answered a race with nothing settled")
}

func futureErr(f settleable) error {
	type errer interface{ rejection() error }
	if e, ok := f.(errer); ok {
		return e.rejection()
	}
	return nil
}

func (f *Future[T]) rejection() error { return f.err }

// awaitOne is awaitFutures for a single future, without the slice.
func awaitOne(f settleable) {
	f.settle(awaitSettled(f.futureID()))
}

// awaitSettled waits for one future and returns how it settled and its
// value, which aliases the response buffer until the next op.
func awaitSettled(id uint32) (abi.FutureState, []byte) {
	if id == 0 {
		panic("sandflow: awaiting a future the host never made")
	}
	payload := binary.LittleEndian.AppendUint32(awaitBuf[:0], uint32(abi.AwaitAll))
	payload = binary.LittleEndian.AppendUint32(payload, id)
	awaitBuf = payload
	for {
		r := doOp(abi.OpAwait, "", payload)
		switch r.status {
		case abi.StatusOK:
			b := r.payload
			if len(b) < 12 || binary.LittleEndian.Uint32(b) != id || uint64(len(b)-12) < uint64(binary.LittleEndian.Uint32(b[8:])) {
				panic("sandflow: malformed await response")
			}
			return abi.FutureState(binary.LittleEndian.Uint32(b[4:])), b[12 : 12+binary.LittleEndian.Uint32(b[8:])]
		case abi.StatusSuspend:
			suspend()
		default:
			panic(fmt.Sprintf("sandflow: the host refused an await (%s): %s", r.status, r.payload))
		}
	}
}

// awaitBuf is reused for await payloads: the host reads them during the op.
var awaitBuf []byte

func awaitFutures(mode abi.AwaitMode, fs []settleable) {
	payload := binary.LittleEndian.AppendUint32(awaitBuf[:0], uint32(mode))
	n := 0
	for _, f := range fs {
		if !f.isDone() {
			if f.futureID() == 0 {
				panic("sandflow: awaiting a future the host never made")
			}
			payload = binary.LittleEndian.AppendUint32(payload, f.futureID())
			n++
		}
	}
	awaitBuf = payload
	if n == 0 {
		return
	}
	for {
		r := doOp(abi.OpAwait, "", payload)
		switch r.status {
		case abi.StatusOK:
			settleEntries(r.payload, fs)
			return
		case abi.StatusSuspend:
			suspend()
		default:
			panic(fmt.Sprintf("sandflow: the host refused an await (%s): %s", r.status, r.payload))
		}
	}
}

func settleEntries(b []byte, fs []settleable) {
	for len(b) >= 12 {
		id := binary.LittleEndian.Uint32(b)
		st := abi.FutureState(binary.LittleEndian.Uint32(b[4:]))
		n := binary.LittleEndian.Uint32(b[8:])
		if uint64(len(b)-12) < uint64(n) {
			panic("sandflow: truncated await response")
		}
		v := b[12 : 12+n]
		b = b[12+n:]
		for _, f := range fs {
			if f.futureID() == id && !f.isDone() {
				f.settle(st, v)
			}
		}
	}
}

// Sleep returns a future that settles after d, durably: the run holds no
// compute meanwhile and the timer survives restarts. d is counted from the
// run's logical time.
func Sleep(ctx *Context, d time.Duration) *Future[struct{}] {
	ms := d.Milliseconds()
	return newFuture[struct{}](doOp(abi.OpSleep, "", []byte(`{"ms":`+strconv.FormatInt(ms, 10)+`}`)))
}

// SleepUntil returns a future that settles at t.
func SleepUntil(ctx *Context, t time.Time) *Future[struct{}] {
	return newFuture[struct{}](doOp(abi.OpSleep, "", []byte(`{"until":`+strconv.FormatInt(t.UnixMilli(), 10)+`}`)))
}

// Question types, as the ABI defines them.
type (
	AskRequest = abi.AskRequest
	AskOption  = abi.AskOption
	Answer     = abi.AskAnswer
)

// Ask displays, option styles and answer statuses.
const (
	DisplayConfirmation = abi.DisplayConfirmation
	DisplaySelect       = abi.DisplaySelect
	DisplayText         = abi.DisplayText
	StylePrimary        = abi.StylePrimary
	StyleDanger         = abi.StyleDanger
	StyleDefault        = abi.StyleDefault
	Answered            = abi.AnswerAnswered
	Cancelled           = abi.AnswerCancelled
	Unavailable         = abi.AnswerUnavailable
)

// askBuf holds Ask's payloads: the host reads them during the op.
var askBuf []byte

// Ask opens a question for a person and returns a future for the answer.
// The question stays open until someone answers it or the run ends; a run
// that cannot ask anyone gets Status "unavailable" at once.
func Ask(ctx *Context, req AskRequest) *Future[Answer] {
	b, err := appendAskRequest(askBuf[:0], req) // on replay too: see Step.Start
	if err != nil {
		b = unencodable
	} else {
		askBuf = b
	}
	f := newFuture[Answer](doOp(abi.OpAsk, "", b))
	if err != nil {
		f.err = err
	}
	return f
}

// Progress publishes a progress snapshot (a JavaScript body's yield). When the body
// returns nothing (null), the last snapshot is the run's result.
func Progress(ctx *Context, v any) error {
	b, err := encodeValue(v) // on replay too: see Step.Start
	if err != nil {
		doOp(abi.OpProgress, "", unencodable) // refused, and takes its position
		return err
	}
	if r := doOp(abi.OpProgress, "", b); r.status != abi.StatusOK {
		return decodeError(r.payload)
	}
	return nil
}

// Metadata describes the run (JavaScript's getWorkflowMetadata).
type Metadata = abi.Metadata

// GetMetadata returns the run's metadata.
func GetMetadata(ctx *Context) Metadata {
	var m Metadata
	_ = json.Unmarshal(doOp(abi.OpMetadata, "", nil).payload, &m)
	return m
}

// Agent types, as the ABI defines them.
type (
	AgentRequest = abi.AgentRequest
	AgentResult  = abi.AgentResult
	AgentError   = abi.AgentError
)

// Agent sends req.Message to a new session with the named agent (the
// JavaScript tool's ctx.agent) and returns a future for the turn's result. A failed
// turn fulfils the future too, with Status "failed" and an Error: only a
// refused op (an empty name, an invalid outputSchema) rejects it.
func Agent(ctx *Context, name string, req AgentRequest) *Future[AgentResult] {
	b, err := json.Marshal(req) // on replay too: see Step.Start
	if err != nil {
		b = unencodable
	}
	f := newFuture[AgentResult](doOp(abi.OpAgent, name, b))
	if err != nil {
		f.err = err
	}
	return f
}

// Serve registers the tool's entry point for a resumable task (the
// JavaScript tool's serve): fn takes calls from calls.Receive, the first being the
// one that started the task, and answers them with Reply; the model sends
// more calls by the task's id. Returning answers the calls still waiting
// with the result and ends the task; an error fails them. Call it once,
// from an init function; the manifest's entry is "serve".
func Serve[In, Out any](fn func(ctx *Context, calls *Calls[In]) (Out, error)) {
	register("serve", func(ctx *Context) (json.RawMessage, *abi.ErrorObject) {
		out, err := fn(ctx, &Calls[In]{})
		if err != nil {
			return nil, errorObject(err)
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "encoding the result: " + err.Error()}
		}
		return b, nil
	})
}

// ServeCall is one call of a serve tool's task: its input, the session's id
// for it, and its index (0 is the call that started the task).
type ServeCall[In any] struct {
	Input  In     `json:"input"`
	CallID string `json:"callId"`
	Index  int    `json:"index"`
}

// receivedCalls is how many calls the body has received: one past the
// highest index a receive future delivered to it. Reply sends it, so a
// reply answers only calls the body has seen.
var receivedCalls int

// receivedCall is a ServeCall, whatever its input type.
type receivedCall interface{ noteReceived() }

func (c *ServeCall[In]) noteReceived() { receivedCalls = max(receivedCalls, c.Index+1) }

// Calls are a serve body's calls.
type Calls[In any] struct {
	pending *Future[ServeCall[In]]
}

// Receive returns a future for the next call. While one is pending,
// Receive returns that one.
func (c *Calls[In]) Receive(ctx *Context) *Future[ServeCall[In]] {
	if c.pending != nil && !c.pending.Done() {
		return c.pending
	}
	c.pending = newFuture[ServeCall[In]](doOp(abi.OpReceive, "", nil))
	return c.pending
}

// Reply answers every call received so far (its receive future has
// settled for the body) and not yet answered with output, withdraws the
// questions still open, and returns how many calls it answered (0: no
// call was waiting, and the reply is dropped). The task goes idle until
// its next call.
func Reply(ctx *Context, output any) (int, error) {
	out, err := json.Marshal(output)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(abi.ReplyRequest{Received: receivedCalls, Output: out})
	if err != nil {
		return 0, err
	}
	r := doOp(abi.OpReply, "", b)
	if r.status != abi.StatusOK {
		return 0, decodeError(r.payload)
	}
	var rr abi.ReplyResult
	if err := json.Unmarshal(r.payload, &rr); err != nil {
		return 0, fmt.Errorf("sandflow: bad reply answer: %w", err)
	}
	return rr.Answered, nil
}

// AbortInfo says why a run was aborted.
type AbortInfo = abi.AbortInfo

// Signal returns a future that fulfils when the run is next aborted (the
// JavaScript tool's abortSignal: a task_cancel, a cancelled or failed turn, the end
// of the session, a steer), with the reason. The run then has the host's
// grace period (30 s by default) to unwind before it is cancelled; a serve
// body that goes back to Receive stays available. Race it against the
// work that should stop.
func Signal(ctx *Context) *Future[AbortInfo] {
	return newFuture[AbortInfo](doOp(abi.OpSignal, "", nil))
}
