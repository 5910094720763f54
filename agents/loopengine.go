package agents

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine"
)

// LoopEngineName is the engine the loop agents' tools run on: Go code in
// the host process that speaks the same ops as a WebAssembly guest, so a
// turn of a loop agent is a run like any other (recorded, replayed,
// resumed after a restart).
const LoopEngineName = "loop"

// loopEngine runs the loop agents' modules, each the JSON of a LoopAgent.
type loopEngine struct{ l *Loop }

var _ host.SourceEngine = loopEngine{}

func (e loopEngine) Name() string                { return LoopEngineName + "/1" }
func (e loopEngine) Close(context.Context) error { return nil }

// Compile implements host.Engine: the module is a loop agent's
// configuration.
func (e loopEngine) Compile(_ context.Context, module []byte) (host.CompiledModule, error) {
	var a LoopAgent
	if err := json.Unmarshal(module, &a); err != nil {
		return nil, &host.PluginError{Reason: "bad_program", Detail: fmt.Sprintf("a loop agent's module is its JSON configuration: %v", err)}
	}
	if err := a.check(); err != nil {
		return nil, &host.PluginError{Reason: "bad_program", Detail: err.Error()}
	}
	return &loopModule{l: e.l, a: a}, nil
}

// Check implements host.SourceEngine.
func (e loopEngine) Check(context.Context, host.CompiledModule, host.Manifest, host.Limits) error {
	return nil
}

type loopModule struct {
	l *Loop
	a LoopAgent
}

func (m *loopModule) Close(context.Context) error { return nil }

func (m *loopModule) Instantiate(_ context.Context, cfg engine.InstanceConfig) (host.Instance, error) {
	return &loopInstance{m: m, ops: cfg.Ops, resume: make(chan struct{}), yield: make(chan int32), quit: make(chan struct{})}, nil
}

// loopInstance runs the loop body as a coroutine: the first RunExport
// starts it on a goroutine of its own, and each later one lets it go on
// from the await it suspended at; Call returns when it suspends or
// completes. A fresh instance replays the run from the top against its
// log, as a guest does. Only one of Call and the body runs at a time.
type loopInstance struct {
	m       *loopModule
	ops     engine.OpHandler
	ctx     context.Context // the current Call's
	started bool
	resume  chan struct{}
	yield   chan int32
	quit    chan struct{}
	closed  bool
	err     error // what ended the body, reported by Call
}

// opAbort carries an OpHandler's error out of the body.
type opAbort struct{ err error }

var errInstanceClosed = errors.New("loop: instance closed")

func (i *loopInstance) Close(context.Context) error {
	if !i.closed {
		i.closed = true
		close(i.quit)
	}
	return nil
}

func (i *loopInstance) Call(ctx context.Context, export string) (int32, error) {
	switch export {
	case abi.VersionExport:
		return abi.Version, nil
	case abi.StepExport:
		return i.runStep(ctx)
	case abi.RunExport:
	default:
		return 0, &host.GuestError{Message: fmt.Sprintf("loop: no export %s", export)}
	}
	if i.err != nil {
		return 0, i.err
	}
	i.ctx = ctx
	if !i.started {
		i.started = true
		go i.body()
	} else {
		i.resume <- struct{}{}
	}
	v := <-i.yield
	if i.err != nil {
		return 0, i.err
	}
	return v, nil
}

// body runs the loop, completes the run, and waits to be closed.
func (i *loopInstance) body() {
	defer func() {
		if r := recover(); r != nil {
			if r == errInstanceClosed {
				return
			}
			if a, ok := r.(opAbort); ok {
				i.err = a.err
			} else {
				i.err = &host.GuestError{Message: fmt.Sprintf("loop: %v", r)}
			}
			i.yield <- 0
		}
	}()
	res, eo := runLoop(&guest{i: i}, &i.m.a)
	out, err := json.Marshal(abi.Outcome{Result: res, Error: eo})
	if err != nil {
		panic(err)
	}
	if st, _, p := i.op(abi.OpComplete, "", out); st != abi.StatusOK {
		out, _ = json.Marshal(abi.Outcome{Error: &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "the host refused the result: " + string(p)}})
		i.op(abi.OpComplete, "", out)
	}
	i.yield <- abi.RunDone
	<-i.quit
}

// op performs an op and copies its payload out of the host's buffer.
func (i *loopInstance) op(kind abi.OpKind, name string, payload []byte) (abi.Status, uint32, []byte) {
	return doOp(i.ctx, i.ops, kind, name, payload)
}

func doOp(ctx context.Context, ops engine.OpHandler, kind abi.OpKind, name string, payload []byte) (abi.Status, uint32, []byte) {
	b, err := ops.Op(ctx, kind, []byte(name), payload)
	if err != nil {
		panic(opAbort{err})
	}
	if len(b) < abi.BodyHeaderSize {
		panic(fmt.Sprintf("the host answered op %s with %d bytes", kind, len(b)))
	}
	return abi.Status(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]), append([]byte(nil), b[abi.BodyHeaderSize:]...)
}

// suspend hands control back to Call until the host resumes the run.
func (i *loopInstance) suspend() {
	i.yield <- abi.RunSuspended
	select {
	case <-i.resume:
	case <-i.quit:
		panic(errInstanceClosed)
	}
}

// guest is the loop body's side of the ops.
type guest struct{ i *loopInstance }

// future is a step's or a question's result, as far as the body knows.
type future struct {
	id   uint32
	done bool
	val  json.RawMessage
	err  *abi.ErrorObject
}

func (g *guest) input() json.RawMessage {
	_, _, p := g.i.op(abi.OpInput, "", nil)
	return p
}

// start issues an op that makes a future (a step, a question).
func (g *guest) start(kind abi.OpKind, name string, payload any) *future {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	st, id, p := g.i.op(kind, name, b)
	f := &future{id: id}
	switch st {
	case abi.StatusPending:
	case abi.StatusOK:
		f.done, f.val = true, p
	case abi.StatusRejected:
		f.done, f.err = true, errorOf(p)
	default:
		panic(fmt.Sprintf("the host refused op %s %s (%s): %s", kind, name, st, p))
	}
	return f
}

// step schedules a step.
func (g *guest) step(name string, input any, retry *abi.RetryPolicy) *future {
	in, err := json.Marshal(input)
	if err != nil {
		panic(err)
	}
	return g.start(abi.OpStep, name, abi.StepRequest{Input: in, Retry: retry})
}

// await waits for f to settle.
func (g *guest) await(f *future) {
	if f.done {
		return
	}
	payload := binary.LittleEndian.AppendUint32(nil, uint32(abi.AwaitAll))
	payload = binary.LittleEndian.AppendUint32(payload, f.id)
	for {
		st, _, b := g.i.op(abi.OpAwait, "", payload)
		switch st {
		case abi.StatusOK:
			if len(b) < 12 || binary.LittleEndian.Uint32(b) != f.id || uint64(len(b)-12) < uint64(binary.LittleEndian.Uint32(b[8:])) {
				panic("malformed await response")
			}
			v := b[12 : 12+binary.LittleEndian.Uint32(b[8:])]
			f.done = true
			if abi.FutureState(binary.LittleEndian.Uint32(b[4:])) == abi.FutureRejected {
				f.err = errorOf(v)
			} else {
				f.val = v
			}
			return
		case abi.StatusSuspend:
			g.i.suspend()
		default:
			panic(fmt.Sprintf("the host refused an await (%s): %s", st, b))
		}
	}
}

// progress records a progress value (a warning, say).
func (g *guest) progress(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	g.i.op(abi.OpProgress, "", b)
}

func errorOf(p []byte) *abi.ErrorObject {
	var eo abi.ErrorObject
	if json.Unmarshal(p, &eo) != nil || eo.Message == "" {
		return &abi.ErrorObject{Type: abi.ErrTypeError, Message: string(p)}
	}
	return &eo
}

// runStep runs one step attempt: a model call or a tool call.
func (i *loopInstance) runStep(ctx context.Context) (int32, error) {
	var res json.RawMessage
	var eo *abi.ErrorObject
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				if a, ok := r.(opAbort); ok {
					err = a.err
					return
				}
				eo = &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: fmt.Sprintf("loop step: %v", r)}
			}
		}()
		_, _, p := doOp(ctx, i.ops, abi.OpStepInput, "", nil)
		var in abi.StepInput
		if err := json.Unmarshal(p, &in); err != nil {
			eo = &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "loop step: the step input: " + err.Error()}
			return nil
		}
		res, eo = i.m.l.attempt(ctx, &i.m.a, in)
		return nil
	}()
	if err != nil {
		return 0, err
	}
	out, err := json.Marshal(abi.Outcome{Result: res, Error: eo})
	if err != nil {
		return 0, err
	}
	st, _, p := doOpSafe(ctx, i.ops, abi.OpStepComplete, out)
	if st == abi.StatusTooLarge {
		out, _ = json.Marshal(abi.Outcome{Error: &abi.ErrorObject{Type: abi.ErrTypeTooLarge, Message: string(p)}})
		doOpSafe(ctx, i.ops, abi.OpStepComplete, out)
	}
	return abi.RunDone, nil
}

// doOpSafe is doOp for the step side, which reports an OpHandler's error
// through Call rather than a panic.
func doOpSafe(ctx context.Context, ops engine.OpHandler, kind abi.OpKind, payload []byte) (st abi.Status, id uint32, p []byte) {
	defer func() {
		if r := recover(); r != nil {
			st, p = abi.StatusFailed, []byte(fmt.Sprint(r))
		}
	}()
	return doOp(ctx, ops, kind, "", payload)
}
