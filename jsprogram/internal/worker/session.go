package worker

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	"github.com/sandflow/sandflow/jsprogram/internal/replay"

	"github.com/dop251/goja"

	"github.com/sandflow/sandflow/abi"
)

// errAborted: the parent ended the activation.
var errAborted = errors.New("jsprogram: activation aborted")

// limitHit is what the worker interrupts the VM with when a time limit
// passes.
type limitHit struct{ code string }

func (l *limitHit) Error() string { return "jsprogram: limit " + l.code }

// session runs one activation.
type session struct {
	r      *bufio.Reader
	w      *bufio.Writer
	act    proto.Activation
	lim    proto.Limits
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
	// cannot (see internal/replay); nil then, or when no log came.
	rp *replay.Replayer

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

func (s *session) run() (d proto.Done) {
	s.start = time.Now()
	s.total = time.AfterFunc(s.lim.TotalTime, func() { s.interrupt(proto.CodeTotalTime) })
	defer s.total.Stop()
	s.resume()
	defer s.pause()
	defer func() {
		if x := recover(); x != nil {
			// A panic in goja itself (it converts most into exceptions):
			// the program cannot continue, and the worker is suspect.
			s.broken = true
			if tooBig(x) {
				d = proto.Done{Status: "failed", Error: &proto.WorkflowProgramError{Code: proto.CodeMemory,
					Message: fmt.Sprintf("the program asked for more memory than there is (%v); the limit is %d MiB", x, s.lim.MemoryBytes>>20)}}
				return
			}
			d = proto.Done{Status: "failed", Error: &proto.WorkflowProgramError{Code: proto.CodeWorkerCrashed, Message: fmt.Sprintf("the JavaScript engine failed: %v", x)}}
		}
	}()
	var err error
	switch s.act.Kind {
	case proto.KindProgram:
		err = s.activate()
	case proto.KindTool:
		err = s.runTool()
	case proto.KindStep:
		err = s.runStep()
	case proto.KindDefine:
		var def *proto.Definition
		var perr *proto.WorkflowProgramError
		def, perr, err = s.define()
		if err == nil {
			if perr != nil {
				return proto.Done{Status: "failed", Error: perr}
			}
			return proto.Done{Status: "defined", Definition: def}
		}
	default:
		err = fmt.Errorf("jsprogram worker: unknown activation kind %q", s.act.Kind)
	}
	var hit *limitHit
	switch {
	case err == nil:
		return proto.Done{Status: "completed"}
	case errors.Is(err, errAborted):
		return proto.Done{Status: "aborted"}
	case errors.As(err, &hit):
		e := &proto.WorkflowProgramError{Code: hit.code}
		if hit.code == proto.CodeJSTime {
			e.Message = fmt.Sprintf("the program ran JavaScript for more than %s in one %s", s.lim.JSTime, proto.ActivationNoun(s.act.Kind))
		} else {
			e.Message = fmt.Sprintf("one %s took more than %s (it ran %s)", proto.ActivationNoun(s.act.Kind), s.lim.TotalTime, time.Since(s.start).Round(time.Millisecond))
		}
		return proto.Done{Status: "failed", Error: e}
	}
	s.broken = true
	return proto.Done{Status: "failed", Error: &proto.WorkflowProgramError{Code: proto.CodeWorkerCrashed, Message: err.Error()}}
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

// resume starts the JavaScript clock again: it runs while the worker has
// the ball, and stops while the host serves an op.
func (s *session) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running, s.since = true, time.Now()
	left := s.lim.JSTime - s.used
	if s.timer == nil {
		s.timer = time.AfterFunc(left, func() { s.interrupt(proto.CodeJSTime) })
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
		body, fresh, ok := s.rp.Answer(kind, name, payload)
		if ok {
			s.rp.Record(kind, name, payload, body, fresh)
			s.now = s.rp.Clock
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
			if len(s.rp.Answered) >= proto.MaxFrame/2 {
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
	if err := proto.WriteFrame(s.w, proto.FrameOp, proto.U32(uint32(kind)), proto.U32(uint32(len(name))), []byte(name), payload); err != nil {
		s.broken = true
		return nil, fmt.Errorf("jsprogram worker: sending op: %w", err)
	}
	// The host bounds what it sends by InFlightBytes; the frames around
	// it are small.
	typ, body, err := proto.ReadLarge(s.r, int(min(s.lim.InFlightBytes, 1<<40))+proto.MaxFrame)
	if err != nil {
		s.broken = true
		return nil, fmt.Errorf("jsprogram worker: reading reply: %w", err)
	}
	switch typ {
	case proto.FrameReply, proto.FrameReplyFresh:
		if typ == proto.FrameReplyFresh {
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
	case proto.FrameAbort:
		return nil, errAborted
	}
	s.broken = true
	return nil, fmt.Errorf("jsprogram worker: unexpected frame %q", typ)
}

func status(body []byte) abi.Status { return abi.Status(binary.LittleEndian.Uint32(body)) }

func (s *session) complete(result []byte, perr *proto.WorkflowProgramError) error {
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
			return s.complete(nil, &proto.WorkflowProgramError{Code: proto.CodeOutputTooLarge, Message: "the host refused the return value: " + proto.Clip(eo.Message, 1000)})
		}
		if perr.Stack != "" || len(perr.Message) > 1000 {
			return s.complete(nil, &proto.WorkflowProgramError{Code: perr.Code, Name: perr.Name, Line: perr.Line, Column: perr.Column, Message: proto.Clip(perr.Message, 1000)})
		}
		return fmt.Errorf("the host refused the program's error: %s", eo.Message)
	}
	return nil
}

func (s *session) setup() error {
	vm := goja.New()
	vm.SetParserOptions(parseOptions...)
	vm.SetMaxCallStackSize(s.lim.StackDepth)
	rng := rand.New(rand.NewChaCha8([32]byte(pad32(s.act.Seed))))
	vm.SetRandSource(rng.Float64)
	if s.act.Kind == proto.KindStep {
		vm.SetTimeSource(stepNow)
	} else {
		vm.SetTimeSource(func() time.Time { return time.Unix(0, s.now).UTC() })
	}
	if s.act.Kind == proto.KindProgram {
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
