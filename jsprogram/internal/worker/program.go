package worker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/dop251/goja"

	"github.com/sandflow/sandflow/abi"
)

// call is one ctx.agent call.
type call struct {
	pos        uint32
	name       string
	n          int // 1-based call number
	structured bool
	resolve    func(any) error
	reject     func(any) error
	settled    bool
	value      string // JSON, when fulfilled
	err        *agentErr
}

type agentErr struct{ code, message string }

func (s *session) activate() error {
	body, err := s.op(abi.OpInput, "", nil)
	if err != nil {
		return err
	}
	var in struct {
		JS *string `json:"js"`
	}
	if status(body) != abi.StatusOK || json.Unmarshal(body[abi.BodyHeaderSize:], &in) != nil || in.JS == nil {
		return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Message: `the input must be an object with the program's source in "js", a string`})
	}
	js := *in.JS
	if len(js) > s.lim.SourceBytes {
		return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeSourceTooLarge,
			Message: fmt.Sprintf("the program is %d bytes; the limit is %d bytes", len(js), s.lim.SourceBytes)})
	}
	prg, perr := s.cache.get(js)
	if perr != nil {
		return s.complete(nil, perr)
	}
	if err := s.setup(); err != nil {
		return err
	}
	fnv, err := s.vm.RunProgram(prg)
	if err != nil {
		return s.fail(err)
	}
	fn, _ := goja.AssertFunction(fnv)
	ret, err := fn(goja.Undefined(), s.shim.Get("ctx"))
	if err != nil {
		return s.fail(err)
	}
	p, ok := ret.Export().(*goja.Promise)
	if !ok {
		return fmt.Errorf("jsprogram worker: the program's function returned %T, not a promise", ret.Export())
	}
	flush, _ := goja.AssertFunction(s.shim.Get("flush"))
	for p.State() == goja.PromiseStatePending {
		if len(s.pending) == 0 {
			return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeNeverSettles,
				Message: "the program waits for something that never happens: only ctx.agent calls settle, and none is pending (a promise nothing resolves, say)"})
		}
		if !s.pending[0].settled {
			if err := s.awaitBatch(); err != nil {
				return err
			}
		}
		// Deliver the batch in call order, one settlement per turn, until
		// the program returns.
		for len(s.pending) > 0 && s.pending[0].settled && p.State() == goja.PromiseStatePending {
			c := s.pending[0]
			s.pending = s.pending[1:]
			if err := s.deliver(c); err != nil {
				return s.fail(err)
			}
			if _, err := flush(goja.Undefined()); err != nil {
				return s.fail(err)
			}
		}
	}
	if p.State() == goja.PromiseStateRejected {
		return s.completeUncaught(p.Result())
	}
	if v := s.unhandledAgentError(); v != nil {
		return s.completeUncaught(v)
	}
	if len(s.pending) > 0 {
		return s.complete(nil, s.pendingAtReturn())
	}
	return s.completeValue(p.Result())
}

// trackRejection keeps the program's unhandled rejections
// (goja.PromiseRejectionTracker).
func (s *session) trackRejection(p *goja.Promise, op goja.PromiseRejectionOperation) {
	switch op {
	case goja.PromiseRejectionReject:
		if s.unhandled == nil {
			s.unhandled = map[*goja.Promise]int{}
		}
		s.rejected++
		s.unhandled[p] = s.rejected
	case goja.PromiseRejectionHandle:
		delete(s.unhandled, p)
	}
}

// unhandledAgentError is the first ctx.agent failure the program never
// handled, or nil. ctx.agent rejects its promise for every failure; one
// nothing awaits or catches still fails the run, as it did when a bad call
// threw, instead of vanishing.
func (s *session) unhandledAgentError() goja.Value {
	codeOf, _ := goja.AssertFunction(s.shim.Get("agentCode"))
	var first goja.Value
	rank := 0
	for p, n := range s.unhandled {
		if first != nil && n > rank || p.State() != goja.PromiseStateRejected {
			continue
		}
		c, err := codeOf(goja.Undefined(), p.Result())
		if err != nil {
			continue
		}
		if agentCodes[c.String()] {
			first, rank = p.Result(), n
		}
	}
	return first
}

// pendingAtReturn is the error of a program that returned with calls
// still pending.
func (s *session) pendingAtReturn() *proto.WorkflowProgramError {
	names := make([]string, 0, len(s.pending))
	for _, c := range s.pending {
		names = append(names, fmt.Sprintf("call %d to %q", c.n, proto.Clip(c.name, 64)))
	}
	return &proto.WorkflowProgramError{Code: proto.CodePendingAtReturn, Message: fmt.Sprintf(
		"the program returned while %d ctx.agent call(s) were still pending (%s); await every call, with Promise.all for a fan-out (a call that loses a Promise.race or Promise.any stays pending)",
		len(s.pending), proto.Clip(strings.Join(names, ", "), 1000))}
}

func (s *session) completeValue(v goja.Value) error {
	enc, _ := goja.AssertFunction(s.shim.Get("encode"))
	r, err := enc(goja.Undefined(), v, s.vm.ToValue("the return value"))
	if err != nil {
		return s.fail(err)
	}
	arr := r.ToObject(s.vm)
	// Encoding ran the program's toJSON methods and getters, which may
	// have called ctx.agent.
	if v := s.unhandledAgentError(); v != nil {
		return s.completeUncaught(v)
	}
	if len(s.pending) > 0 {
		return s.complete(nil, s.pendingAtReturn())
	}
	if js := arr.Get("0"); js != nil && !goja.IsUndefined(js) {
		out := js.String()
		if len(out) > s.lim.ValueBytes {
			return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeOutputTooLarge,
				Message: fmt.Sprintf("the return value is %d bytes as JSON; the limit is %d bytes", len(out), s.lim.ValueBytes)})
		}
		// The shim's walk stops an honest deep value before it is
		// encoded; the text decides (toJSON, getters and proxies can show
		// the walk one value and JSON.stringify another).
		if d := jsonDepth(out); d > s.lim.ValueDepth {
			return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeOutputTooDeep,
				Message: fmt.Sprintf("the return value nests %d levels deep as JSON; the limit is %d", d, s.lim.ValueDepth)})
		}
		return s.complete([]byte(out), nil)
	}
	code := proto.CodeNotSerializable
	if arr.Get("1").String() == "too_deep" {
		code = proto.CodeOutputTooDeep
	}
	return s.complete(nil, &proto.WorkflowProgramError{Code: code, Message: arr.Get("2").String()})
}

// fail turns an error from the VM into the activation's outcome: a limit,
// an abort, or a program error the run ends with.
func (s *session) fail(err error) error {
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		if e, ok := ie.Value().(error); ok {
			return e
		}
		return fmt.Errorf("interrupted: %v", ie.Value())
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeStackOverflow, Name: "RangeError",
			Message: fmt.Sprintf("RangeError: Maximum call stack size exceeded (the limit is %d frames)", s.lim.StackDepth)})
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return s.completeUncaught(ex.Value())
	}
	return err
}

func (s *session) completeUncaught(v goja.Value) error {
	e, err := s.uncaught(v)
	if err != nil {
		var ie *goja.InterruptedError
		if errors.As(err, &ie) {
			return s.fail(err)
		}
		e = &proto.WorkflowProgramError{Code: proto.CodeUncaught, Message: "Uncaught a value that cannot be shown"}
	}
	return s.complete(nil, e)
}

// uncaught describes a value the program threw and nothing caught. What
// it reads of the value runs in the VM (the program's getters may run, and
// are bounded by the time limit); an error here is the VM's, such as an
// interrupt.
func (s *session) uncaught(v goja.Value) (*proto.WorkflowProgramError, error) {
	desc, _ := goja.AssertFunction(s.shim.Get("describe"))
	r, err := desc(goja.Undefined(), v)
	if err != nil {
		return nil, err
	}
	arr := r.ToObject(s.vm)
	field := func(i int) string { return arr.Get(strconv.Itoa(i)).String() }
	name, message, rawStack, code, plain := field(0), field(1), field(2), field(3), field(4)
	e := &proto.WorkflowProgramError{Code: proto.CodeUncaught, Name: proto.Clip(name, 200)}
	if code != "" && agentCodes[code] {
		e.Code = code
	}
	if name == "" && message == "" {
		if plain == "" {
			plain = "a value that cannot be shown"
		}
		e.Message = "Uncaught " + proto.Clip(plain, maxMessage)
		return e, nil
	}
	stack, line, col := bodyStack(proto.Clip(rawStack, maxStack))
	e.Stack, e.Line, e.Column = stack, line, col
	if name == "RangeError" && strings.Contains(message, "call stack") {
		e.Code = proto.CodeStackOverflow
	}
	e.Message = "Uncaught " + proto.Clip(strings.TrimPrefix(name+": "+message, ": "), maxMessage)
	if line > 0 {
		e.Message += fmt.Sprintf(" (line %d, column %d)", line, col)
	}
	return e, nil
}

// The longest message and stack a run's error keeps.
const (
	maxMessage = 8 << 10
	maxStack   = 16 << 10
)

// agentCodes are the codes a genuine WorkflowProgramAgentError carries.
var agentCodes = map[string]bool{
	proto.CodeInvalidCall: true, proto.CodeInputTooLarge: true, proto.CodeMaxSubagents: true, proto.CodeReplyTooLarge: true,
	abi.AgentErrFailed: true, abi.AgentErrUnavailable: true, abi.AgentErrTimeout: true, abi.AgentErrBadOutput: true,
}

func (s *session) throw(code, msg string) {
	ctor, _ := goja.AssertFunction(s.shim.Get("agentError"))
	v, err := ctor(goja.Undefined(), s.vm.ToValue(code), s.vm.ToValue(msg))
	if err != nil {
		// Never a Go error value: it would hand the program Go methods.
		var ex *goja.Exception
		if errors.As(err, &ex) {
			panic(ex.Value())
		}
		panic(s.vm.NewTypeError(msg))
	}
	panic(v)
}

// agent is host.agent(name, inputJSON, structured): it issues the op and
// returns the call's promise.
func (s *session) agent(fc goja.FunctionCall) goja.Value {
	name := fc.Argument(0).String()
	input := fc.Argument(1).String()
	structured := fc.Argument(2).ToBoolean()
	if s.calls >= s.lim.MaxSubagents {
		s.throw(proto.CodeMaxSubagents, fmt.Sprintf("ctx.agent(%q): call %d is over this workflow's maxSubagents budget of %d calls", name, s.calls+1, s.lim.MaxSubagents))
	}
	if len(name) > 256 {
		s.throw(proto.CodeInvalidCall, fmt.Sprintf("ctx.agent(%q): the agent name is %d bytes; the limit is 256", proto.Clip(name, 64), len(name)))
	}
	if len(input) > s.lim.ValueBytes {
		s.throw(proto.CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): the input is %d bytes as JSON; the limit is %d bytes", name, len(input), s.lim.ValueBytes))
	}
	if d := jsonDepth(input); d > s.lim.ValueDepth {
		s.throw(proto.CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): the input nests %d levels deep as JSON; the limit is %d", name, d, s.lim.ValueDepth))
	}
	// Every call that reaches the host counts, refused ones too: each is
	// recorded, so a loop of refused calls is stopped by the budget.
	s.calls++
	body, err := s.op(abi.OpAgent, name, []byte(input))
	if err != nil {
		s.vm.Interrupt(err)
		return goja.Undefined()
	}
	st := status(body)
	switch st {
	case abi.StatusPending, abi.StatusOK, abi.StatusRejected:
	case abi.StatusTooLarge:
		s.throw(proto.CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): %s", name, refusal(body)))
	default:
		s.throw(proto.CodeInvalidCall, fmt.Sprintf("ctx.agent(%q): %s", name, refusal(body)))
	}
	p, res, rej := s.vm.NewPromise()
	c := &call{pos: binary.LittleEndian.Uint32(body[4:]), name: name, n: s.calls, structured: structured, resolve: res, reject: rej}
	if st != abi.StatusPending {
		s.settle(c, st == abi.StatusOK, body[abi.BodyHeaderSize:])
	}
	s.pending = append(s.pending, c)
	return s.vm.ToValue(p)
}

func refusal(body []byte) string {
	var eo abi.ErrorObject
	if json.Unmarshal(body[abi.BodyHeaderSize:], &eo) == nil && eo.Message != "" {
		return eo.Message
	}
	return fmt.Sprintf("the host refused the call (status %d)", status(body))
}

// settle records a call's outcome from the host's value.
func (s *session) settle(c *call, fulfilled bool, raw []byte) {
	c.settled = true
	if !fulfilled {
		var eo abi.ErrorObject
		_ = json.Unmarshal(raw, &eo)
		c.err = &agentErr{abi.AgentErrFailed, fmt.Sprintf("ctx.agent(%q) failed: %s", c.name, eo.Message)}
		return
	}
	var r abi.AgentResult
	if err := json.Unmarshal(raw, &r); err != nil {
		c.err = &agentErr{abi.AgentErrFailed, fmt.Sprintf("ctx.agent(%q): the host sent a result that is not JSON", c.name)}
		return
	}
	switch r.Status {
	case abi.AgentCompleted:
		var v []byte
		if c.structured {
			v = r.Data
			if len(v) == 0 {
				c.err = &agentErr{abi.AgentErrBadOutput, fmt.Sprintf("ctx.agent(%q): the child turn gave no structured output", c.name)}
				return
			}
		} else {
			v, _ = json.Marshal(r.Reply)
		}
		if len(v) > s.lim.ReplyBytes {
			c.err = &agentErr{proto.CodeReplyTooLarge, fmt.Sprintf("ctx.agent(%q): the child's reply is %d bytes as JSON; the limit is %d bytes", c.name, len(v), s.lim.ReplyBytes)}
			return
		}
		c.value = string(v)
	default:
		code, msg := abi.AgentErrFailed, "the child turn "+r.Status
		if r.Error != nil {
			if r.Error.Code != "" {
				code = r.Error.Code
			}
			if r.Error.Message != "" {
				msg = r.Error.Message
			}
		}
		c.err = &agentErr{code, fmt.Sprintf("ctx.agent(%q) failed: %s", c.name, msg)}
	}
}

// errSuspended: a non-blocking await found the run must wait.
var errSuspended = errors.New("jsprogram worker: the run waits")

// awaitBatch waits for every pending call that has not settled: blocking
// (the host ends the activation if the run must wait), or, when the
// activation parks, parked until the run resumes, then asking again.
func (s *session) awaitBatch() error {
	var positions []uint32
	byPos := map[uint32]*call{}
	for _, c := range s.pending {
		if !c.settled {
			positions = append(positions, c.pos)
			byPos[c.pos] = c
		}
	}
	mode := abi.AwaitAll | abi.AwaitBlock
	if s.act.Park {
		mode = abi.AwaitAll
	}
	for {
		err := s.awaitFutures(mode, positions, func(pos uint32, ok bool, raw []byte) {
			if c := byPos[pos]; c != nil {
				s.settle(c, ok, raw)
			}
		})
		if !errors.Is(err, errSuspended) {
			return err
		}
		if err := s.park(); err != nil {
			return err
		}
	}
}

// park keeps the program live while its run waits: it tells the parent,
// with what the worker holds, and waits for the run to resume. Its clocks
// do not run meanwhile.
func (s *session) park() error {
	s.pause()
	s.total.Stop()
	if err := proto.WriteFrame(s.w, proto.FrameSuspend, proto.U64(heldBytes())); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: parking: %w", err)
	}
	typ, _, err := proto.ReadFrame(s.r)
	if err != nil || typ != proto.FrameContinue {
		s.broken = true
		return fmt.Errorf("jsprogram worker: parked, then got frame %q: %v", typ, err)
	}
	s.start = time.Now()
	s.total.Reset(s.lim.TotalTime)
	s.resume()
	return nil
}

// awaitFutures waits for the futures at positions (all of them, or any;
// blocking when mode has AwaitBlock), and calls settled for each one the
// host says has settled, with its value or error object.
func (s *session) awaitFutures(mode abi.AwaitMode, positions []uint32, settled func(pos uint32, ok bool, raw []byte)) error {
	payload := proto.U32(uint32(mode))
	for _, p := range positions {
		payload = binary.LittleEndian.AppendUint32(payload, p)
	}
	body, err := s.op(abi.OpAwait, "", payload)
	if err != nil {
		return err
	}
	if st := status(body); st == abi.StatusSuspend && mode&abi.AwaitBlock == 0 {
		return errSuspended
	} else if st != abi.StatusOK {
		return fmt.Errorf("jsprogram worker: await answered %d: %s", st, refusal(body))
	}
	rest := body[abi.BodyHeaderSize:]
	for len(rest) >= 12 {
		pos := binary.LittleEndian.Uint32(rest)
		state := binary.LittleEndian.Uint32(rest[4:])
		n := binary.LittleEndian.Uint32(rest[8:])
		if uint64(len(rest)-12) < uint64(n) {
			break
		}
		settled(pos, state == uint32(abi.FutureFulfilled), rest[12:12+n])
		rest = rest[12+n:]
	}
	return nil
}

// deliver settles a call's promise inside the VM; the value enters as JSON
// parsed there, so no Go value (nor a Go map's order) reaches the program.
func (s *session) deliver(c *call) error {
	if c.err != nil {
		ctor, _ := goja.AssertFunction(s.shim.Get("agentError"))
		v, err := ctor(goja.Undefined(), s.vm.ToValue(c.err.code), s.vm.ToValue(c.err.message))
		if err != nil {
			return err
		}
		return c.reject(v)
	}
	parse, _ := goja.AssertFunction(s.shim.Get("parse"))
	v, err := parse(goja.Undefined(), s.vm.ToValue(c.value))
	if err != nil {
		return err
	}
	return c.resolve(v)
}

// write is host.write(stream, text): console output to the run's log.
func (s *session) write(fc goja.FunctionCall) goja.Value {
	stream := byte(fc.Argument(0).ToInteger())
	text := fc.Argument(1).String()
	room := s.lim.OutputBytes - s.written
	if room <= 0 {
		return goja.Undefined()
	}
	if len(text) > room {
		text = text[:room] + "\n[console output over the limit; the rest is dropped]\n"
	}
	s.written += len(text)
	if err := proto.WriteFrame(s.w, proto.FrameWrite, []byte{stream}, []byte(text)); err != nil {
		s.broken = true
		s.vm.Interrupt(err)
	}
	return goja.Undefined()
}
