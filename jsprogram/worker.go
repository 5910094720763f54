package jsprogram

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"

	"github.com/sandflow/sandflow/abi"
)

//go:embed shim.js
var shimSource string

var shimProgram = goja.MustCompile("shim.js", shimSource, true)

// workerEnv marks a process started as a worker.
const workerEnv = "SANDFLOW_JS_WORKER"

// memoryEnv passes the worker its heap limit in bytes.
const memoryEnv = "SANDFLOW_JS_MEMORY"

// MaybeWorker turns this process into a program worker when it was started
// as one, and then never returns. Call it first in main (and in TestMain of
// tests that run programs): the host runs programs in re-executed copies of
// its own binary.
func MaybeWorker() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	os.Exit(workerMain(os.Stdin, os.Stdout))
}

// Exit codes of a worker; the parent reads them with the tail of stderr.
const (
	exitOK       = 0
	exitProtocol = 3
	exitMemory   = 4
)

func workerMain(in io.Reader, out io.Writer) int {
	time.Local = time.UTC
	if v := os.Getenv(memoryEnv); v != "" {
		var n int64
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			capMemory(n)
		}
	}
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	cache := newProgramCache(32)
	for {
		typ, body, err := readFrame(r)
		if errors.Is(err, io.EOF) {
			return exitOK
		}
		if err != nil || typ != frameActivate {
			fmt.Fprintf(os.Stderr, "jsprogram worker: want an activation, got frame %q: %v\n", typ, err)
			return exitProtocol
		}
		var a activation
		if err := json.Unmarshal(body, &a); err != nil {
			fmt.Fprintf(os.Stderr, "jsprogram worker: bad activation: %v\n", err)
			return exitProtocol
		}
		s := &session{r: r, w: w, act: a, lim: a.Limits.withDefaults(), cache: cache, now: a.Now}
		if a.Log {
			l, err := readLog(r, s.lim)
			if err != nil {
				fmt.Fprintf(os.Stderr, "jsprogram worker: reading the log: %v\n", err)
				return exitProtocol
			}
			s.rp = newReplayer(l, a.Now)
		}
		d := s.run()
		raw, _ := json.Marshal(d)
		if err := s.sendAnswered(); err != nil {
			return exitProtocol
		}
		if err := writeFrame(w, frameDone, raw); err != nil {
			return exitProtocol
		}
		if s.broken {
			return exitProtocol
		}
	}
}

// programCache keeps compiled programs (workflow tool bodies) and tool
// scripts by the hash of their source: a run that resumes replays the same
// one.
type programCache struct {
	bodies  *compileCache[*goja.Program]
	scripts *compileCache[*script]
}

func newProgramCache(n int) *programCache {
	return &programCache{bodies: newCompileCache(n, compileBody), scripts: newCompileCache(n, compileScript)}
}

func (c *programCache) get(js string) (*goja.Program, *WorkflowProgramError) { return c.bodies.get(js) }

func (c *programCache) script(src string) (*script, *WorkflowProgramError) {
	return c.scripts.get(src)
}

// compileCache holds the last max things compile made, by source hash.
type compileCache[T any] struct {
	max     int
	order   []string
	m       map[string]T
	compile func(string) (T, *WorkflowProgramError)
}

func newCompileCache[T any](max int, compile func(string) (T, *WorkflowProgramError)) *compileCache[T] {
	return &compileCache[T]{max: max, m: map[string]T{}, compile: compile}
}

func (c *compileCache[T]) get(src string) (T, *WorkflowProgramError) {
	sum := sha256.Sum256([]byte(src))
	key := string(sum[:])
	if v, ok := c.m[key]; ok {
		return v, nil
	}
	v, perr := c.compile(src)
	if perr != nil {
		return v, perr
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, key)
	c.m[key] = v
	return v, nil
}

// errAborted: the parent ended the activation.
var errAborted = errors.New("jsprogram: activation aborted")

// limitHit is what the worker interrupts the VM with when a time limit
// passes.
type limitHit struct{ code string }

func (l *limitHit) Error() string { return "jsprogram: limit " + l.code }

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

// session runs one activation.
type session struct {
	r      *bufio.Reader
	w      *bufio.Writer
	act    activation
	lim    Limits
	cache  *programCache
	broken bool // the protocol failed: the worker must exit

	vm      *goja.Runtime
	shim    *goja.Object
	now     int64
	calls   int
	pending []*call
	written int
	// unhandled are the program's rejected promises nothing has handled
	// yet, each with its rank in the order they were rejected.
	unhandled map[*goja.Promise]int
	rejected  int

	// rp answers replayed ops from the run's log, until the first it
	// cannot (see replay.go); nil then, or when no log came.
	rp *replayer

	// An authored tool's prelude, and the futures of its ops not yet
	// delivered.
	tool *goja.Object
	futs []*fut

	// total is the activation's time limit; a parked program's stops
	// while it is parked and starts again when it resumes, at start.
	total *time.Timer
	start time.Time

	mu      sync.Mutex
	running bool
	since   time.Time
	used    time.Duration
	timer   *time.Timer
}

func (s *session) run() (d doneMsg) {
	s.start = time.Now()
	s.total = time.AfterFunc(s.lim.TotalTime, func() { s.interrupt(CodeTotalTime) })
	defer s.total.Stop()
	s.resume()
	defer s.pause()
	defer func() {
		if x := recover(); x != nil {
			// A panic in goja itself (it converts most into exceptions):
			// the program cannot continue, and the worker is suspect.
			s.broken = true
			if tooBig(x) {
				d = doneMsg{Status: "failed", Error: &WorkflowProgramError{Code: CodeMemory,
					Message: fmt.Sprintf("the program asked for more memory than there is (%v); the limit is %d MiB", x, s.lim.MemoryBytes>>20)}}
				return
			}
			d = doneMsg{Status: "failed", Error: &WorkflowProgramError{Code: CodeWorkerCrashed, Message: fmt.Sprintf("the JavaScript engine failed: %v", x)}}
		}
	}()
	var err error
	switch s.act.Kind {
	case kindProgram:
		err = s.activate()
	case kindTool:
		err = s.runTool()
	case kindStep:
		err = s.runStep()
	case kindDefine:
		var def *Definition
		var perr *WorkflowProgramError
		def, perr, err = s.define()
		if err == nil {
			if perr != nil {
				return doneMsg{Status: "failed", Error: perr}
			}
			return doneMsg{Status: "defined", Definition: def}
		}
	default:
		err = fmt.Errorf("jsprogram worker: unknown activation kind %q", s.act.Kind)
	}
	var hit *limitHit
	switch {
	case err == nil:
		return doneMsg{Status: "completed"}
	case errors.Is(err, errAborted):
		return doneMsg{Status: "aborted"}
	case errors.As(err, &hit):
		e := &WorkflowProgramError{Code: hit.code}
		if hit.code == CodeJSTime {
			e.Message = fmt.Sprintf("the program ran JavaScript for more than %s in one %s", s.lim.JSTime, activationNoun(s.act.Kind))
		} else {
			e.Message = fmt.Sprintf("one %s took more than %s (it ran %s)", activationNoun(s.act.Kind), s.lim.TotalTime, time.Since(s.start).Round(time.Millisecond))
		}
		return doneMsg{Status: "failed", Error: e}
	}
	s.broken = true
	return doneMsg{Status: "failed", Error: &WorkflowProgramError{Code: CodeWorkerCrashed, Message: err.Error()}}
}

// tooBig reports whether a panic is the Go runtime refusing an allocation
// larger than any address space ("makeslice: len out of range"), as goja
// makes for 'x'.repeat(2**62): the program asked for too much memory,
// which is memory_limit, not a crash.
func tooBig(x any) bool {
	re, ok := x.(runtime.Error)
	if !ok {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"makeslice: ", "growslice: ", "makemap: ", "makechan: "} {
		if strings.Contains(msg, p) && strings.Contains(msg, "out of range") {
			return true
		}
	}
	return false
}

// activationNoun names what an activation of kind runs, for messages.
func activationNoun(kind string) string {
	switch kind {
	case kindStep:
		return "step attempt"
	case kindDefine:
		return "load of the script"
	}
	return "start or resume"
}

// resume starts the JavaScript clock again: it runs while the worker has
// the ball, and stops while the host serves an op.
func (s *session) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running, s.since = true, time.Now()
	left := s.lim.JSTime - s.used
	if s.timer == nil {
		s.timer = time.AfterFunc(left, func() { s.interrupt(CodeJSTime) })
	} else {
		s.timer.Reset(left)
	}
}

// pause stops the JavaScript clock while the host serves an op.
func (s *session) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		s.used += time.Since(s.since)
		s.running = false
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *session) interrupt(code string) {
	s.mu.Lock()
	vm := s.vm
	s.mu.Unlock()
	if vm != nil {
		vm.Interrupt(&limitHit{code: code})
	}
}

// op sends an op to the host and waits for its answer, or answers it from
// the log while the program replays.
func (s *session) op(kind abi.OpKind, name string, payload []byte) ([]byte, error) {
	if s.rp != nil {
		body, fresh, ok := s.rp.answer(kind, name, payload)
		if ok {
			s.rp.record(kind, name, payload, body, fresh)
			s.now = s.rp.clock
			if fresh {
				// A recorded activation's budget starts afresh, as the
				// host's 'F' reply starts it.
				s.pause()
				s.mu.Lock()
				s.used = 0
				s.mu.Unlock()
				s.resume()
				if err := s.renew(); err != nil {
					return nil, err
				}
			}
			if len(s.rp.answered) >= maxFrame/2 {
				if err := s.flushAnswered(); err != nil {
					return nil, err
				}
			}
			return body, nil
		}
		if err := s.sendAnswered(); err != nil {
			return nil, err
		}
	}
	s.pause()
	defer s.resume()
	if err := writeFrame(s.w, frameOp, u32(uint32(kind)), u32(uint32(len(name))), []byte(name), payload); err != nil {
		s.broken = true
		return nil, fmt.Errorf("jsprogram worker: sending op: %w", err)
	}
	// The host bounds what it sends by InFlightBytes; the frames around
	// it are small.
	typ, body, err := readLarge(s.r, int(min(s.lim.InFlightBytes, 1<<40))+maxFrame)
	if err != nil {
		s.broken = true
		return nil, fmt.Errorf("jsprogram worker: reading reply: %w", err)
	}
	switch typ {
	case frameReply, frameReplyFresh:
		if typ == frameReplyFresh {
			// The host passed a recorded activation's end, or the
			// replay's: what comes next has a budget of its own.
			s.mu.Lock()
			s.used = 0
			s.mu.Unlock()
		}
		if len(body) < 8+abi.BodyHeaderSize {
			s.broken = true
			return nil, fmt.Errorf("jsprogram worker: short reply of %d bytes", len(body))
		}
		s.now = int64(binary.LittleEndian.Uint64(body))
		return body[8:], nil
	case frameAbort:
		return nil, errAborted
	}
	s.broken = true
	return nil, fmt.Errorf("jsprogram worker: unexpected frame %q", typ)
}

func status(body []byte) abi.Status { return abi.Status(binary.LittleEndian.Uint32(body)) }

func (s *session) complete(result []byte, perr *WorkflowProgramError) error {
	var payload []byte
	if perr != nil {
		payload, _ = json.Marshal(map[string]any{"error": perr.Object()})
	} else {
		payload = append(append([]byte(`{"result":`), result...), '}')
	}
	body, err := s.op(abi.OpComplete, "", payload)
	if err != nil {
		return err
	}
	if st := status(body); st != abi.StatusOK {
		// The host refused the result (over its own payload limit, say):
		// fail the run with that instead.
		var eo abi.ErrorObject
		_ = json.Unmarshal(body[abi.BodyHeaderSize:], &eo)
		if perr == nil {
			return s.complete(nil, &WorkflowProgramError{Code: CodeOutputTooLarge, Message: "the host refused the return value: " + clip(eo.Message, 1000)})
		}
		if perr.Stack != "" || len(perr.Message) > 1000 {
			return s.complete(nil, &WorkflowProgramError{Code: perr.Code, Name: perr.Name, Line: perr.Line, Column: perr.Column, Message: clip(perr.Message, 1000)})
		}
		return fmt.Errorf("the host refused the program's error: %s", eo.Message)
	}
	return nil
}

func (s *session) activate() error {
	body, err := s.op(abi.OpInput, "", nil)
	if err != nil {
		return err
	}
	var in struct {
		JS *string `json:"js"`
	}
	if status(body) != abi.StatusOK || json.Unmarshal(body[abi.BodyHeaderSize:], &in) != nil || in.JS == nil {
		return s.complete(nil, &WorkflowProgramError{Code: CodeSyntaxError, Message: `the input must be an object with the program's source in "js", a string`})
	}
	js := *in.JS
	if len(js) > s.lim.SourceBytes {
		return s.complete(nil, &WorkflowProgramError{Code: CodeSourceTooLarge,
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
			return s.complete(nil, &WorkflowProgramError{Code: CodeNeverSettles,
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
func (s *session) pendingAtReturn() *WorkflowProgramError {
	names := make([]string, 0, len(s.pending))
	for _, c := range s.pending {
		names = append(names, fmt.Sprintf("call %d to %q", c.n, clip(c.name, 64)))
	}
	return &WorkflowProgramError{Code: CodePendingAtReturn, Message: fmt.Sprintf(
		"the program returned while %d ctx.agent call(s) were still pending (%s); await every call, with Promise.all for a fan-out (a call that loses a Promise.race or Promise.any stays pending)",
		len(s.pending), clip(strings.Join(names, ", "), 1000))}
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
			return s.complete(nil, &WorkflowProgramError{Code: CodeOutputTooLarge,
				Message: fmt.Sprintf("the return value is %d bytes as JSON; the limit is %d bytes", len(out), s.lim.ValueBytes)})
		}
		// The shim's walk stops an honest deep value before it is
		// encoded; the text decides (toJSON, getters and proxies can show
		// the walk one value and JSON.stringify another).
		if d := jsonDepth(out); d > s.lim.ValueDepth {
			return s.complete(nil, &WorkflowProgramError{Code: CodeOutputTooDeep,
				Message: fmt.Sprintf("the return value nests %d levels deep as JSON; the limit is %d", d, s.lim.ValueDepth)})
		}
		return s.complete([]byte(out), nil)
	}
	code := CodeNotSerializable
	if arr.Get("1").String() == "too_deep" {
		code = CodeOutputTooDeep
	}
	return s.complete(nil, &WorkflowProgramError{Code: code, Message: arr.Get("2").String()})
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
		return s.complete(nil, &WorkflowProgramError{Code: CodeStackOverflow, Name: "RangeError",
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
		e = &WorkflowProgramError{Code: CodeUncaught, Message: "Uncaught a value that cannot be shown"}
	}
	return s.complete(nil, e)
}

// uncaught describes a value the program threw and nothing caught. What
// it reads of the value runs in the VM (the program's getters may run, and
// are bounded by the time limit); an error here is the VM's, such as an
// interrupt.
func (s *session) uncaught(v goja.Value) (*WorkflowProgramError, error) {
	desc, _ := goja.AssertFunction(s.shim.Get("describe"))
	r, err := desc(goja.Undefined(), v)
	if err != nil {
		return nil, err
	}
	arr := r.ToObject(s.vm)
	field := func(i int) string { return arr.Get(strconv.Itoa(i)).String() }
	name, message, rawStack, code, plain := field(0), field(1), field(2), field(3), field(4)
	e := &WorkflowProgramError{Code: CodeUncaught, Name: clip(name, 200)}
	if code != "" && agentCodes[code] {
		e.Code = code
	}
	if name == "" && message == "" {
		if plain == "" {
			plain = "a value that cannot be shown"
		}
		e.Message = "Uncaught " + clip(plain, maxMessage)
		return e, nil
	}
	stack, line, col := bodyStack(clip(rawStack, maxStack))
	e.Stack, e.Line, e.Column = stack, line, col
	if name == "RangeError" && strings.Contains(message, "call stack") {
		e.Code = CodeStackOverflow
	}
	e.Message = "Uncaught " + clip(strings.TrimPrefix(name+": "+message, ": "), maxMessage)
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
	CodeInvalidCall: true, CodeInputTooLarge: true, CodeMaxSubagents: true, CodeReplyTooLarge: true,
	abi.AgentErrFailed: true, abi.AgentErrUnavailable: true, abi.AgentErrTimeout: true, abi.AgentErrBadOutput: true,
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("... [%d bytes cut]", len(s)-i)
}

func (s *session) setup() error {
	vm := goja.New()
	vm.SetParserOptions(parseOptions...)
	vm.SetMaxCallStackSize(s.lim.StackDepth)
	rng := rand.New(rand.NewChaCha8([32]byte(pad32(s.act.Seed))))
	vm.SetRandSource(rng.Float64)
	if s.act.Kind == kindStep {
		vm.SetTimeSource(stepNow)
	} else {
		vm.SetTimeSource(func() time.Time { return time.Unix(0, s.now).UTC() })
	}
	if s.act.Kind == kindProgram {
		vm.SetPromiseRejectionTracker(s.trackRejection)
	}
	s.mu.Lock()
	s.vm = vm
	s.mu.Unlock()
	fv, err := vm.RunProgram(shimProgram)
	if err != nil {
		return fmt.Errorf("jsprogram worker: prelude: %w", err)
	}
	fn, _ := goja.AssertFunction(fv)
	host := vm.NewObject()
	_ = host.Set("agent", s.agent)
	_ = host.Set("write", s.write)
	_ = host.Set("depth", jsonDepth)
	sv, err := fn(goja.Undefined(), host, vm.ToValue(s.lim.ValueDepth))
	if err != nil {
		return fmt.Errorf("jsprogram worker: prelude: %w", err)
	}
	s.shim = sv.ToObject(vm)
	return nil
}

func pad32(b []byte) []byte {
	out := make([]byte, 32)
	copy(out, b)
	return out
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
		s.throw(CodeMaxSubagents, fmt.Sprintf("ctx.agent(%q): call %d is over this workflow's maxSubagents budget of %d calls", name, s.calls+1, s.lim.MaxSubagents))
	}
	if len(name) > 256 {
		s.throw(CodeInvalidCall, fmt.Sprintf("ctx.agent(%q): the agent name is %d bytes; the limit is 256", clip(name, 64), len(name)))
	}
	if len(input) > s.lim.ValueBytes {
		s.throw(CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): the input is %d bytes as JSON; the limit is %d bytes", name, len(input), s.lim.ValueBytes))
	}
	if d := jsonDepth(input); d > s.lim.ValueDepth {
		s.throw(CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): the input nests %d levels deep as JSON; the limit is %d", name, d, s.lim.ValueDepth))
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
		s.throw(CodeInputTooLarge, fmt.Sprintf("ctx.agent(%q): %s", name, refusal(body)))
	default:
		s.throw(CodeInvalidCall, fmt.Sprintf("ctx.agent(%q): %s", name, refusal(body)))
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
			c.err = &agentErr{CodeReplyTooLarge, fmt.Sprintf("ctx.agent(%q): the child's reply is %d bytes as JSON; the limit is %d bytes", c.name, len(v), s.lim.ReplyBytes)}
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
	if err := writeFrame(s.w, frameSuspend, u64(heldBytes())); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: parking: %w", err)
	}
	typ, _, err := readFrame(s.r)
	if err != nil || typ != frameContinue {
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
	payload := u32(uint32(mode))
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
	if err := writeFrame(s.w, frameWrite, []byte{stream}, []byte(text)); err != nil {
		s.broken = true
		s.vm.Interrupt(err)
	}
	return goja.Undefined()
}

// capMemory bounds the worker's memory at n bytes three ways: the garbage
// collector works harder as the heap nears n; a watchdog ends the process
// when what the runtime holds stays over n (a loop that keeps what it
// allocates); and the address space is capped, so that one allocation no
// collection can make room for ('x'.repeat(2**40)) fails in the kernel
// instead of taking the machine's memory. The parent reports each as
// memory_limit.
func capMemory(n int64) {
	debug.SetMemoryLimit(n)
	setAddressSpaceLimit(n)
	go watchMemory(uint64(n))
}

// heldBytes is the memory the runtime holds from the system: all it
// mapped, less what it gave back.
func heldBytes() uint64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	return samples[0].Value.Uint64() - samples[1].Value.Uint64()
}

func watchMemory(n uint64) {
	over := 0
	for range time.Tick(10 * time.Millisecond) {
		held := heldBytes()
		if held <= n {
			over = 0
			continue
		}
		// Over for a moment can be garbage the collector has yet to take
		// back; over for 50 ms with the collector at it is not.
		if over++; over >= 5 {
			fmt.Fprintf(os.Stderr, "jsprogram worker: out of memory: holding %d bytes, over the limit of %d\n", held, n)
			os.Exit(exitMemory)
		}
	}
}

// jsonDepth is how deeply JSON text nests (0 for a scalar).
func jsonDepth(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
