package worker

import (
	"cmp"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/dop251/goja"

	"github.com/sandflow/sandflow/abi"
)

//go:embed toolshim.js
var toolShimSource string

var toolShimProgram = goja.MustCompile("toolshim.js", toolShimSource, true)

// fut is a future an authored tool's op made, not yet delivered to the VM.
type fut struct {
	kind            abi.OpKind
	pos             uint32
	resolve, reject func(any) error
	settled, ok     bool
	raw             []byte
}

// maxPending bounds the futures a run waits on at once (an await's limit).
const maxPending = 4096

// loadScript compiles and runs a tool script in a fresh VM with the tool
// prelude for mode. A failure is the error object the activation ends
// with (perr), or an error from the VM or the host (err).
func (s *session) loadScript(mode string) (*script, *proto.WorkflowProgramError, error) {
	sc, perr := s.cache.script(s.act.Source)
	if perr != nil {
		return nil, perr, nil
	}
	if err := s.setup(); err != nil {
		return nil, nil, err
	}
	fv, err := s.vm.RunProgram(toolShimProgram)
	if err != nil {
		return nil, nil, fmt.Errorf("jsprogram worker: tool prelude: %w", err)
	}
	fn, _ := goja.AssertFunction(fv)
	host := s.vm.NewObject()
	_ = host.Set("future", s.hostFuture)
	_ = host.Set("call", s.hostCall)
	_ = host.Set("isWorkflow", func(text string) bool { return hasDirective(text, "use workflow") })
	ops := s.vm.NewObject()
	for name, k := range map[string]abi.OpKind{
		"sleep": abi.OpSleep, "ask": abi.OpAsk, "step": abi.OpStep, "agent": abi.OpAgent, "progress": abi.OpProgress,
		"hookCreate": abi.OpHookCreate, "hookNext": abi.OpHookNext, "hookDispose": abi.OpHookDispose,
		"webhookRespond": abi.OpWebhookRespond, "metadata": abi.OpMetadata,
		"receive": abi.OpReceive, "reply": abi.OpReply, "signal": abi.OpSignal, "stepAborted": abi.OpStepAborted,
	} {
		_ = ops.Set(name, int(k))
	}
	tv, err := fn(goja.Undefined(), host, s.shim, s.vm.ToValue(mode), ops)
	if err != nil {
		return nil, nil, fmt.Errorf("jsprogram worker: tool prelude: %w", err)
	}
	s.tool = tv.ToObject(s.vm)
	if _, err := s.vm.RunProgram(sc.prg); err != nil {
		return nil, nil, err
	}
	if goja.IsUndefined(s.callTool("definition")) {
		return nil, &proto.WorkflowProgramError{Code: proto.CodeNoDefinition, Message: "the script never called defineWorkflowTool({ description, inputSchema, execute | task | serve })"}, nil
	}
	return sc, nil, nil
}

// callTool calls a function of the tool prelude that cannot throw.
func (s *session) callTool(name string, args ...goja.Value) goja.Value {
	f, _ := goja.AssertFunction(s.tool.Get(name))
	v, err := f(goja.Undefined(), args...)
	if err != nil {
		panic(err)
	}
	return v
}

// define runs a script far enough to read its definition.
func (s *session) define() (*proto.Definition, *proto.WorkflowProgramError, error) {
	sc, perr, err := s.loadScript(proto.KindDefine)
	if perr != nil || err != nil {
		if err != nil {
			perr, err = s.loadFailure(err)
		}
		return nil, perr, err
	}
	d := s.callTool("definition").ToObject(s.vm)
	return &proto.Definition{
		Description: d.Get("description").String(),
		InputSchema: json.RawMessage(d.Get("inputSchema").String()),
		Entry:       d.Get("entry").String(),
		Steps:       sc.steps,
	}, nil, nil
}

// loadFailure turns an error from running a script's top level into the
// error the script is refused with, or returns an interrupt as is.
func (s *session) loadFailure(err error) (*proto.WorkflowProgramError, error) {
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		return nil, s.fail(err)
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return &proto.WorkflowProgramError{Code: proto.CodeStackOverflow, Name: "RangeError",
			Message: fmt.Sprintf("RangeError: Maximum call stack size exceeded (the limit is %d frames)", s.lim.StackDepth)}, nil
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		eo, err := s.toolError(ex.Value())
		if err != nil {
			return s.loadFailure(err)
		}
		var d toolErrorDetails
		_ = json.Unmarshal(eo.Details, &d)
		return &proto.WorkflowProgramError{Code: proto.CodeUncaught, Name: eo.Type, Message: "Uncaught " + eo.Type + ": " + eo.Message + " (while the script loads)",
			Line: d.Line, Column: d.Column, Stack: d.Stack}, nil
	}
	return nil, err
}

// toolErrorDetails are the details of an error object a tool's uncaught
// error becomes.
type toolErrorDetails struct {
	Stack  string `json:"stack,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
}

var scriptStackPos = regexp.MustCompile(regexp.QuoteMeta(scriptName) + `:(\d+):(\d+)`)

// stackScript finds the script's file name in a stack's frames.
var stackScript = regexp.MustCompile(`(^|[\s(])` + regexp.QuoteMeta(scriptName) + `:`)

// toolError is the error object a value thrown by a tool's code becomes:
// its name as the type (FatalError, RetryableError, TypeError, ...), its
// message, and its stack. Reading them runs the script's getters, which a
// limit can stop: that error is returned, for the activation to end with.
func (s *session) toolError(v goja.Value) (*abi.ErrorObject, error) {
	f, _ := goja.AssertFunction(s.tool.Get("toObject"))
	ov, err := f(goja.Undefined(), v)
	if err != nil {
		var ex *goja.Exception
		if !errors.As(err, &ex) {
			return nil, err
		}
		return &abi.ErrorObject{Type: "Error", Message: "a value that cannot be shown"}, nil
	}
	// The prelude's object has no prototype and holds only primitives;
	// each field is read on its own, never through the script's JSON.
	o := ov.ToObject(s.vm)
	str := func(name string) string {
		if x := o.Get(name); x != nil && !goja.IsUndefined(x) {
			return x.String()
		}
		return ""
	}
	eo := abi.ErrorObject{Type: proto.Clip(str("type"), 200), Message: proto.Clip(str("message"), maxMessage)}
	if eo.Type == "" {
		eo.Type = "Error"
	}
	if x := o.Get("retryable"); x != nil {
		eo.Retryable = x.ToBoolean()
	}
	if x := o.Get("retryAfterMs"); x != nil && !goja.IsUndefined(x) {
		eo.RetryAfterMs = x.ToInteger()
	}
	if stack := str("stack"); stack != "" {
		d := toolErrorDetails{Stack: proto.Clip(stack, maxStack)}
		if m := scriptStackPos.FindStringSubmatch(d.Stack); m != nil {
			d.Line, _ = strconv.Atoi(m[1])
			d.Column, _ = strconv.Atoi(m[2])
		}
		// The run's error names the script by its tool. The program
		// itself sees tool.js in its stacks, as it always has, so that a
		// run recorded before replays the same.
		if s.act.Name != "" {
			d.Stack = stackScript.ReplaceAllString(d.Stack, "${1}"+s.act.Name+".js:")
		}
		eo.Details, _ = json.Marshal(d)
	}
	return &eo, nil
}

// finishThrown ends the activation with op and the error object of a
// thrown value, or with the limit that stopped reading it.
func (s *session) finishThrown(op abi.OpKind, v goja.Value) error {
	eo, err := s.toolError(v)
	if err != nil {
		return s.runFailure(op, err)
	}
	return s.finish(op, nil, eo)
}

// finish reports an authored tool's outcome with op (complete or
// step_complete).
func (s *session) finish(op abi.OpKind, result []byte, eo *abi.ErrorObject) error {
	var payload []byte
	if eo != nil {
		payload, _ = json.Marshal(map[string]any{"error": eo})
	} else {
		payload = append(append([]byte(`{"result":`), result...), '}')
	}
	body, err := s.op(op, "", payload)
	if err != nil {
		return err
	}
	if st := status(body); st != abi.StatusOK {
		var refused abi.ErrorObject
		_ = json.Unmarshal(body[abi.BodyHeaderSize:], &refused)
		if eo == nil || len(eo.Details) > 0 || len(eo.Message) > 1000 {
			// A result over the host's limit, or an error too big to
			// keep: end with a small error that says so.
			small := &abi.ErrorObject{Type: abi.ErrTypeTooLarge, Message: "the host refused the outcome: " + proto.Clip(refused.Message, 1000)}
			if eo != nil {
				small = &abi.ErrorObject{Type: eo.Type, Message: proto.Clip(eo.Message, 1000)}
			}
			return s.finish(op, nil, small)
		}
		return fmt.Errorf("the host refused the tool's error: %s", refused.Message)
	}
	return nil
}

// runFailure turns an error from the VM while a tool runs into its
// outcome: a thrown value becomes the error object the run or step ends
// with; a limit or an abort ends the activation.
func (s *session) runFailure(op abi.OpKind, err error) error {
	var ex *goja.Exception
	var so *goja.StackOverflowError
	switch {
	case errors.As(err, &so):
		return s.finish(op, nil, (&proto.WorkflowProgramError{Code: proto.CodeStackOverflow, Name: "RangeError",
			Message: fmt.Sprintf("RangeError: Maximum call stack size exceeded (the limit is %d frames)", s.lim.StackDepth)}).Object())
	case errors.As(err, &ex):
		return s.finishThrown(op, ex.Value())
	}
	return s.fail(err)
}

// encodeResult encodes a tool's result within the limits, or says why it
// cannot be.
func (s *session) encodeResult(v goja.Value, what string) ([]byte, *abi.ErrorObject, error) {
	enc, _ := goja.AssertFunction(s.shim.Get("encode"))
	r, err := enc(goja.Undefined(), v, s.vm.ToValue(what))
	if err != nil {
		return nil, nil, err
	}
	arr := r.ToObject(s.vm)
	if js := arr.Get("0"); js != nil && !goja.IsUndefined(js) {
		out := js.String()
		if len(out) > s.lim.ValueBytes {
			return nil, (&proto.WorkflowProgramError{Code: proto.CodeOutputTooLarge,
				Message: fmt.Sprintf("%s is %d bytes as JSON; the limit is %d bytes", what, len(out), s.lim.ValueBytes)}).Object(), nil
		}
		if d := jsonDepth(out); d > s.lim.ValueDepth {
			return nil, (&proto.WorkflowProgramError{Code: proto.CodeOutputTooDeep,
				Message: fmt.Sprintf("%s nests %d levels deep as JSON; the limit is %d", what, d, s.lim.ValueDepth)}).Object(), nil
		}
		return []byte(out), nil, nil
	}
	code := proto.CodeNotSerializable
	if arr.Get("1").String() == "too_deep" {
		code = proto.CodeOutputTooDeep
	}
	return nil, (&proto.WorkflowProgramError{Code: code, Message: arr.Get("2").String()}).Object(), nil
}

// runTool is a start or resume of an authored tool's run: load the
// script, call its entry point with the input, and drive it until it
// settles, waiting for whichever of its futures settles first.
func (s *session) runTool() error {
	_, perr, err := s.loadScript(proto.KindTool)
	if err != nil {
		if perr, err = s.loadFailure(err); err != nil {
			return err
		}
	}
	if perr != nil {
		return s.finish(abi.OpComplete, nil, perr.Object())
	}
	body, err := s.op(abi.OpInput, "", nil)
	if err != nil {
		return err
	}
	if status(body) != abi.StatusOK {
		return fmt.Errorf("jsprogram worker: the host refused the input op: %s", refusal(body))
	}
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	input, err := parse(goja.Undefined(), s.vm.ToValue(string(body[abi.BodyHeaderSize:])))
	if err != nil {
		return err
	}
	var meta abi.Metadata
	if body, err = s.op(abi.OpMetadata, "", nil); err != nil {
		return err
	}
	_ = json.Unmarshal(body[abi.BodyHeaderSize:], &meta)
	ctx := s.callTool("ctx", s.vm.ToValue(meta.WorkflowName), s.vm.ToValue(meta.WorkflowRunID))
	runFn, _ := goja.AssertFunction(s.tool.Get("run"))
	ret, err := runFn(goja.Undefined(), input, ctx)
	if err != nil {
		return s.runFailure(abi.OpComplete, err)
	}
	p := ret.Export().(*goja.Promise)
	if done, err := s.driveTool(p); done || err != nil {
		return err
	}
	if p.State() == goja.PromiseStateRejected {
		return s.finishThrown(abi.OpComplete, p.Result())
	}
	out, eo, err := s.encodeResult(p.Result(), "the result")
	if err != nil {
		return s.runFailure(abi.OpComplete, err)
	}
	return s.finish(abi.OpComplete, out, eo)
}

// driveTool drives a tool's entry point until its promise p settles,
// waiting for whichever of its futures settles first. done: the run
// ended otherwise (it waits on nothing, or on too much), with err.
func (s *session) driveTool(p *goja.Promise) (done bool, err error) {
	flush, _ := goja.AssertFunction(s.shim.Get("flush"))
	for p.State() == goja.PromiseStatePending {
		if len(s.futs) == 0 {
			return true, s.finish(abi.OpComplete, nil, (&proto.WorkflowProgramError{Code: proto.CodeNeverSettles,
				Message: "the workflow waits for something that never happens: only steps, sleeps, questions, hooks, webhooks and agent turns settle, and none is pending (a promise nothing resolves, say)"}).Object())
		}
		if len(s.futs) > maxPending {
			return true, s.finish(abi.OpComplete, nil, (&proto.WorkflowProgramError{Code: proto.CodeTooManyPending,
				Message: fmt.Sprintf("the workflow waits on %d operations at once; the limit is %d", len(s.futs), maxPending)}).Object())
		}
		if err := s.awaitAny(); err != nil {
			return false, err
		}
		// Deliver what settled in the order the ops were made, one per
		// turn, until the body settles; abort signals first, as an abort
		// comes before what it withdraws (questions).
		// Ops the body makes meanwhile come after the batch's.
		batch := s.futs
		s.futs = nil
		slices.SortStableFunc(batch, func(a, b *fut) int {
			return cmp.Compare(b2i(a.kind != abi.OpSignal), b2i(b.kind != abi.OpSignal))
		})
		var rest []*fut
		for _, f := range batch {
			if !f.settled || p.State() != goja.PromiseStatePending {
				rest = append(rest, f)
				continue
			}
			if err := s.deliverFut(f); err != nil {
				return true, s.runFailure(abi.OpComplete, err)
			}
			if _, err := flush(goja.Undefined()); err != nil {
				return true, s.runFailure(abi.OpComplete, err)
			}
		}
		s.futs = append(rest, s.futs...)
	}
	return false, nil
}

// awaitAny waits, blocking, until at least one pending future settles,
// and marks every one the host says has.
func (s *session) awaitAny() error {
	positions := make([]uint32, len(s.futs))
	byPos := make(map[uint32]*fut, len(s.futs))
	for i, f := range s.futs {
		positions[i] = f.pos
		byPos[f.pos] = f
	}
	return s.awaitFutures(abi.AwaitAny|abi.AwaitBlock, positions, func(pos uint32, ok bool, raw []byte) {
		if f := byPos[pos]; f != nil {
			f.settled, f.ok, f.raw = true, ok, raw
		}
	})
}

// deliverFut settles a future's promise with its value or error object,
// parsed inside the VM.
func (s *session) deliverFut(f *fut) error {
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	raw := f.raw
	if len(raw) == 0 {
		raw = []byte("null")
	}
	v, err := parse(goja.Undefined(), s.vm.ToValue(string(raw)))
	if err != nil {
		return err
	}
	if f.ok {
		return f.resolve(v)
	}
	return f.reject(v)
}

// hostFuture is host.future(kind, name, payload): it issues an op that
// makes a future and returns its promise.
func (s *session) hostFuture(fc goja.FunctionCall) goja.Value {
	body := s.hostOp(fc)
	st := status(body)
	p, res, rej := s.vm.NewPromise()
	f := &fut{kind: abi.OpKind(fc.Argument(0).ToInteger()), pos: binary.LittleEndian.Uint32(body[4:]), resolve: res, reject: rej}
	if st == abi.StatusPending {
		s.futs = append(s.futs, f)
	} else {
		f.settled, f.ok, f.raw = true, st == abi.StatusOK, body[abi.BodyHeaderSize:]
		if err := s.deliverFut(f); err != nil {
			panic(err)
		}
	}
	return s.vm.ToValue(p)
}

// hostCall is host.call(kind, name, payload): an op answered at once. It
// returns [future, the value's JSON text].
func (s *session) hostCall(fc goja.FunctionCall) goja.Value {
	body := s.hostOp(fc)
	if status(body) != abi.StatusOK {
		s.throwRefusal(body)
	}
	return s.vm.ToValue([]any{binary.LittleEndian.Uint32(body[4:]), string(body[abi.BodyHeaderSize:])})
}

// hostOp issues the op of a host.future or host.call and throws the
// host's refusal as an error.
func (s *session) hostOp(fc goja.FunctionCall) []byte {
	kind := abi.OpKind(fc.Argument(0).ToInteger())
	if s.act.Kind != proto.KindTool && !(s.act.Kind == proto.KindStep && (kind == abi.OpMetadata || kind == abi.OpStepAborted)) {
		panic(s.vm.NewTypeError("this operation is available only in the workflow body"))
	}
	name := fc.Argument(1).String()
	body, err := s.op(kind, name, []byte(fc.Argument(2).String()))
	if err != nil {
		s.vm.Interrupt(err)
		panic(s.vm.NewTypeError("the activation ended"))
	}
	switch status(body) {
	case abi.StatusOK, abi.StatusPending, abi.StatusRejected:
		return body
	}
	s.throwRefusal(body)
	return nil
}

// throwRefusal throws the error object of a refused op as an Error.
func (s *session) throwRefusal(body []byte) {
	raw := body[abi.BodyHeaderSize:]
	if len(raw) == 0 {
		raw = []byte(fmt.Sprintf(`{"type":"Error","message":"the host refused the operation (status %d)"}`, status(body)))
	}
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	eo, err := parse(goja.Undefined(), s.vm.ToValue(string(raw)))
	if err != nil {
		panic(err)
	}
	panic(s.callTool("toError", eo))
}

// runStep is one step attempt: load the script, call the step function
// the host names with the recorded arguments, and report its outcome.
func (s *session) runStep() error {
	_, perr, err := s.loadScript(proto.KindStep)
	if err != nil {
		if perr, err = s.loadFailure(err); err != nil {
			return err
		}
	}
	if perr != nil {
		return s.finish(abi.OpStepComplete, nil, perr.Object())
	}
	body, err := s.op(abi.OpStepInput, "", nil)
	if err != nil {
		return err
	}
	var in abi.StepInput
	if status(body) != abi.StatusOK || json.Unmarshal(body[abi.BodyHeaderSize:], &in) != nil {
		return fmt.Errorf("jsprogram worker: the host refused step_input: %s", refusal(body))
	}
	// The function the script declared, whatever its binding holds now.
	fn, ok := goja.AssertFunction(s.callTool("stepFn", s.vm.ToValue(in.Name)))
	if !ok {
		return s.finish(abi.OpStepComplete, nil, &abi.ErrorObject{Type: "FatalError",
			Message: fmt.Sprintf("this script has no step %q (its steps are the top-level async functions that start with \"use step\")", in.Name)})
	}
	info, _ := json.Marshal(map[string]any{"stepName": in.Name, "stepId": in.StepID, "attempt": in.Attempt, "workflowRunId": in.RunID})
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	iv, err := parse(goja.Undefined(), s.vm.ToValue(string(info)))
	if err != nil {
		return err
	}
	s.callTool("setStep", iv)
	input := in.Input
	if len(input) == 0 {
		input = json.RawMessage("[]")
	}
	argv, err := s.stepArgs(input)
	if err != nil {
		return err
	}
	ret, err := fn(goja.Undefined(), argv...)
	if err != nil {
		return s.runFailure(abi.OpStepComplete, err)
	}
	return s.stepOutcome(in.Name, ret)
}

// stepArgs are a step's arguments from its recorded input: the
// arguments as a JSON array, or { args, undefined: [i...], signals:
// [{ i, aborted, reason }] } when some were undefined or abort signals
// (the prelude's step).
func (s *session) stepArgs(input json.RawMessage) ([]goja.Value, error) {
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	args, err := parse(goja.Undefined(), s.vm.ToValue(string(input)))
	if err != nil {
		return nil, err
	}
	var argv []goja.Value
	var undef []int
	var signals []stepSignal
	if !isJSONArray(input) {
		var wrapped struct {
			Args      json.RawMessage `json:"args"`
			Undefined []int           `json:"undefined"`
			Signals   []stepSignal    `json:"signals"`
		}
		if json.Unmarshal(input, &wrapped) == nil && isJSONArray(wrapped.Args) {
			undef, signals = wrapped.Undefined, wrapped.Signals
			if args, err = parse(goja.Undefined(), s.vm.ToValue(string(wrapped.Args))); err != nil {
				return nil, err
			}
		}
	}
	if a, isArray := args.Export().([]any); isArray {
		o := args.ToObject(s.vm)
		for i := range a {
			argv = append(argv, o.Get(strconv.Itoa(i)))
		}
		for _, i := range undef {
			if i >= 0 && i < len(argv) {
				argv[i] = goja.Undefined()
			}
		}
		for _, sg := range signals {
			if sg.I >= 0 && sg.I < len(argv) {
				argv[sg.I] = s.callTool("stepSignal", s.vm.ToValue(sg.Aborted), s.vm.ToValue(sg.Reason))
			}
		}
	} else {
		argv = []goja.Value{args}
	}
	return argv, nil
}

// stepOutcome reports how a step's call ended: what its promise settled
// to, which it must have by the end of the attempt's first turn.
func (s *session) stepOutcome(name string, ret goja.Value) error {
	flush, _ := goja.AssertFunction(s.shim.Get("flush"))
	if _, err := flush(goja.Undefined()); err != nil {
		return s.runFailure(abi.OpStepComplete, err)
	}
	p, _ := ret.Export().(*goja.Promise)
	switch {
	case p == nil:
		return s.finish(abi.OpStepComplete, nil, &abi.ErrorObject{Type: "FatalError", Message: fmt.Sprintf("step %s did not return a promise", name)})
	case p.State() == goja.PromiseStatePending:
		return s.finish(abi.OpStepComplete, nil, &abi.ErrorObject{Type: "Error",
			Message: fmt.Sprintf("step %s waits for something that never settles in a step (steps cannot sleep, ask or wait for hooks; the workflow body can)", name)})
	case p.State() == goja.PromiseStateRejected:
		return s.finishThrown(abi.OpStepComplete, p.Result())
	}
	out, eo, err := s.encodeResult(p.Result(), "the result of step "+name)
	if err != nil {
		return s.runFailure(abi.OpStepComplete, err)
	}
	return s.finish(abi.OpStepComplete, out, eo)
}

// stepNow is the clock of a step attempt: real time, as for WebAssembly
// step instances.
func stepNow() time.Time { return time.Now().UTC() }

// isJSONArray reports whether raw is a JSON array.
func isJSONArray(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '['
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stepSignal is an abort signal among a step's arguments: its position,
// and whether it had aborted (and why) when the step was called.
type stepSignal struct {
	I       int    `json:"i"`
	Aborted bool   `json:"aborted"`
	Reason  string `json:"reason"`
}
