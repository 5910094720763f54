package host

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"

	"github.com/sandflow/sandflow/abi"
)

// Capability is a function an embedding application lets steps call by
// name (abi op "call"). It runs outside the sandbox with the host's
// privileges, so it should do one narrow thing. A plugin may call only the
// capabilities its manifest lists.
type Capability func(ctx context.Context, call CapabilityCall) (json.RawMessage, error)

// CapabilityCall is one call of a capability from a step.
type CapabilityCall struct {
	RunID   string
	StepID  string
	Attempt int
	Input   json.RawMessage
}

// stepAttempt is what a step instance runs.
type stepAttempt struct {
	runID   string
	op      uint32
	name    string
	input   json.RawMessage
	attempt int
	meta    []byte
	// rh and abortsBefore answer OpStepAborted: the run's aborts recorded
	// before the step was called do not count.
	rh           *runHandle
	abortsBefore int
}

// aborted reports whether the attempt's run has been aborted since its
// step was called.
func (a *stepAttempt) aborted() abi.StepAborted {
	if a.rh == nil {
		return abi.StepAborted{}
	}
	seen := a.rh.aborts.Load()
	if seen == nil || seen.n <= a.abortsBefore {
		return abi.StepAborted{}
	}
	return abi.StepAborted{Aborted: true, Reason: seen.reason}
}

// stepOutcome is how an attempt ended.
type stepOutcome struct {
	result json.RawMessage
	err    *abi.ErrorObject
	output []outputChunk
}

type outputChunk struct {
	stream string
	data   []byte
}

// stepInstance is a pooled instance that runs step attempts, one at a time,
// for any run of one plugin version.
type stepInstance struct {
	inst    Instance
	h       *Host
	plugin  *loadedPlugin
	clock   realClock
	cur     *stepAttempt
	outcome *abi.Outcome
	output  []outputChunk
	outSize int
	buf     []byte
}

// Op implements OpHandler for step instances.
func (s *stepInstance) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	if s.cur == nil {
		return nil, &GuestError{Message: fmt.Sprintf("ABI violation: op %s outside a step attempt", kind)}
	}
	if !kind.InStep() {
		switch {
		case kind == abi.OpDescribe:
			return s.refuse(abi.StatusNotAllowed, "op describe is allowed only in sandflow_describe, at upload"), nil
		case kind.Valid():
			return s.refuse(abi.StatusNotAllowed, fmt.Sprintf("op %s is not allowed in a step: a step cannot start steps, sleep, ask or wait", kind)), nil
		}
		return s.refuse(abi.StatusUnknownOp, fmt.Sprintf("unknown op kind %d", uint32(kind))), nil
	}
	switch kind {
	case abi.OpStepInput:
		return s.ok(mustJSON(abi.StepInput{Name: s.cur.name, Input: s.cur.input, StepID: state.StepID(s.cur.runID, s.cur.op), Attempt: s.cur.attempt, RunID: s.cur.runID})), nil
	case abi.OpMetadata:
		return s.ok(s.cur.meta), nil
	case abi.OpStepAborted:
		return s.ok(mustJSON(s.cur.aborted())), nil
	case abi.OpStepComplete:
		if s.outcome != nil {
			return s.refuse(abi.StatusNotAllowed, "step_complete: the attempt is already complete"), nil
		}
		var out abi.Outcome
		if msg := history.DecodeOutcome(payload, &out); msg != "" {
			return s.refuse(abi.StatusBadRequest, "step_complete: "+msg), nil
		}
		if out.Error == nil && len(out.Result) > s.plugin.limits.PayloadBytes {
			out = abi.Outcome{Error: &abi.ErrorObject{Type: abi.ErrTypeTooLarge,
				Message: fmt.Sprintf("step %s result of %d bytes is over the limit of %d", s.cur.name, len(out.Result), s.plugin.limits.PayloadBytes)}}
		}
		out.Result = clone(out.Result)
		s.outcome = &out
		return s.ok(nil), nil
	case abi.OpCall:
		return s.call(ctx, string(name), payload), nil
	}
	return s.refuse(abi.StatusUnknownOp, "unknown op "+kind.String()), nil
}

func (s *stepInstance) call(ctx context.Context, name string, payload []byte) []byte {
	if !s.plugin.allows(name) {
		return s.refuse(abi.StatusNotAllowed, fmt.Sprintf("call: plugin %s does not list capability %q in its manifest", s.plugin.p.Name, name))
	}
	fn := s.h.opts.Capabilities[name]
	if name == abi.CapabilityFetch && fn == nil && !s.h.opts.NoFetch {
		fn = func(ctx context.Context, call CapabilityCall) (json.RawMessage, error) {
			return s.h.fetch(ctx, s.plugin, call.Input)
		}
	}
	if fn == nil {
		return s.refuse(abi.StatusNotFound, fmt.Sprintf("call: this host has no capability %q", name))
	}
	if len(payload) > s.plugin.limits.PayloadBytes {
		return s.refuse(abi.StatusTooLarge, fmt.Sprintf("call: input of %d bytes is over the limit of %d", len(payload), s.plugin.limits.PayloadBytes))
	}
	if !json.Valid(payload) {
		return s.refuse(abi.StatusBadRequest, "call: input is not JSON")
	}
	resume := PauseCPU(ctx)
	res, err := fn(ctx, CapabilityCall{RunID: s.cur.runID, StepID: state.StepID(s.cur.runID, s.cur.op), Attempt: s.cur.attempt, Input: clone(payload)})
	resume()
	if err != nil {
		return s.body(abi.StatusFailed, mustJSON(abi.ErrorObject{Type: abi.ErrTypeCapability, Message: fmt.Sprintf("capability %s: %v", name, err)}))
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	if !json.Valid(res) {
		return s.body(abi.StatusFailed, mustJSON(abi.ErrorObject{Type: abi.ErrTypeCapability, Message: fmt.Sprintf("capability %s returned invalid JSON", name)}))
	}
	return s.ok(res)
}

func (s *stepInstance) body(st abi.Status, payload []byte) []byte {
	s.buf = appendHeader(s.buf[:0], st, 0)
	s.buf = append(s.buf, payload...)
	return s.buf
}

func (s *stepInstance) ok(payload []byte) []byte { return s.body(abi.StatusOK, payload) }

func (s *stepInstance) refuse(st abi.Status, msg string) []byte {
	return s.body(st, mustJSON(abi.ErrorObject{Type: abi.ErrTypeBadRequest, Message: msg}))
}

type stepWriter struct {
	s      *stepInstance
	stream string
}

func (w stepWriter) Write(p []byte) (int, error) {
	s := w.s
	room := int(s.plugin.limits.OutputBytes) - s.outSize
	if room <= 0 || s.cur == nil {
		return len(p), nil
	}
	d := p[:min(len(p), room)]
	s.outSize += len(d)
	if n := len(s.output); n > 0 && s.output[n-1].stream == w.stream {
		s.output[n-1].data = append(s.output[n-1].data, d...)
	} else {
		s.output = append(s.output, outputChunk{stream: w.stream, data: append([]byte(nil), d...)})
	}
	return len(p), nil
}

func (h *Host) newStepInstance(ctx context.Context, lp *loadedPlugin) (*stepInstance, error) {
	s := &stepInstance{h: h, plugin: lp}
	inst, err := lp.cm.Instantiate(ctx, InstanceConfig{
		Clock:       &s.clock,
		Random:      rand.Reader,
		Stdout:      stepWriter{s, "stdout"},
		Stderr:      stepWriter{s, "stderr"},
		Name:        lp.m.Name,
		MemoryLimit: lp.limits.MemoryBytes,
		CPULimit:    lp.limits.CPUTime,
		Ops:         s,
	})
	if err != nil {
		return nil, err
	}
	if err := checkVersion(ctx, inst); err != nil {
		inst.Close(ctx)
		return nil, err
	}
	s.inst = inst
	return s, nil
}

// execStep runs one step attempt in a pooled step instance.
func (h *Host) execStep(ctx context.Context, lp *loadedPlugin, a *stepAttempt) stepOutcome {
	s := lp.takeStepInstance()
	if s == nil {
		var err error
		s, err = h.newStepInstance(ctx, lp)
		if err != nil {
			return stepOutcome{err: errorObject(err)}
		}
	}
	s.cur, s.outcome, s.output, s.outSize = a, nil, nil, 0
	res, err := s.inst.Call(ctx, abi.StepExport)
	out := stepOutcome{output: s.output}
	switch {
	case err != nil:
		h.observeLimit(err)
		out.err = errorObject(err)
		if tail := stderrTail(s.output); tail != "" {
			out.err.Message += "; stderr: " + tail
		}
		s.inst.Close(ctx)
		return out
	case res != abi.RunDone || s.outcome == nil:
		out.err = &abi.ErrorObject{Type: abi.ErrTypeTrap, Message: fmt.Sprintf("step %s returned %d without reporting step_complete", a.name, res)}
		s.inst.Close(ctx)
		return out
	}
	out.result, out.err = s.outcome.Result, s.outcome.Error
	if out.err == nil {
		out.result = state.NullIfEmpty(out.result)
	}
	s.cur, s.outcome, s.output = nil, nil, nil
	lp.putStepInstance(ctx, s)
	return out
}

func stderrTail(chunks []outputChunk) string {
	var b []byte
	for _, c := range chunks {
		if c.stream == "stderr" {
			b = append(b, c.data...)
		}
	}
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	return string(b)
}
