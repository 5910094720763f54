// Package session is the model-facing layer over a host: a platform's
// agent loop lists a session's tools, calls them, gets receipts for tasks
// and their results later (each once, as <task_result> blocks), waits for
// and cancels tasks with task_wait and task_cancel, and reads the [Tasks]
// note. Its texts are fixed: models are prompted with them.
//
// A session's record (its tasks, what was delivered) is kept in the host's
// store, so a session outlives the process; the runs behind its tasks are
// the host's, and resume as any run does.
package session

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// Limits of a session.
const (
	// MaxWorkingTasks is how many tasks a session runs at once.
	MaxWorkingTasks = 32
	// ResultBytes and ResultLines bound the results one message carries.
	ResultBytes = 50_000
	ResultLines = 2_000
	// idleInNote is how many idle resumable tasks the [Tasks] note lists.
	idleInNote = 10
)

// Names of the tools a session adds when it has task tools.
const (
	TaskWaitTool   = "task_wait"
	TaskCancelTool = "task_cancel"
)

// Error codes of a session's errors.
const (
	CodeUnknownTask  = "unknown_task"
	CodeTooManyTasks = "too_many_tasks"
	CodeBadRequest   = "bad_request"
)

// Error is a session's refusal of a call, with a stable code; the model
// reads Message.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Sentinels for errors.Is.
var (
	ErrUnknownTask  = &Error{Code: CodeUnknownTask}
	ErrTooManyTasks = &Error{Code: CodeTooManyTasks}
	ErrBadRequest   = &Error{Code: CodeBadRequest}
)

// Is matches the sentinel of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Task states.
const (
	Working   = "working"
	Completed = "completed"
	Failed    = "failed"
	Cancelled = "cancelled"
	// Idle: a resumable (serve) task whose calls are all answered; it
	// takes more calls by its taskId, and neither holds the turn nor
	// counts toward MaxWorkingTasks.
	Idle = "idle"
)

// Task is one task of a session.
type Task struct {
	ID    string `json:"id"`
	Tool  string `json:"tool"`
	RunID string `json:"runId"`
	// Status is working, completed, failed or cancelled.
	Status string `json:"status"`
	// Delivered: the result was given to the model (or never will be:
	// cancelled work does not report back).
	Delivered bool `json:"delivered,omitempty"`
	// CancelReason is task_cancel, turn_cancelled or turn_ended when the
	// session cancelled the task.
	CancelReason string    `json:"cancelReason,omitempty"`
	StartedAt    time.Time `json:"startedAt"`
	SettledAt    time.Time `json:"settledAt,omitzero"`
	// Output is the result's text, read when the task settles.
	Output string `json:"output,omitempty"`
	// Resumable: a serve tool's task, which takes more calls. Each call's
	// answer is a result of its own; Calls counts the calls sent, and
	// DeliveredCalls the calls whose answers the model has had, in order.
	Resumable      bool      `json:"resumable,omitempty"`
	Calls          int       `json:"calls,omitempty"`
	DeliveredCalls int       `json:"deliveredCalls,omitempty"`
	UsedAt         time.Time `json:"usedAt,omitzero"`

	// answers are a resumable task's answers, in call order, up to the
	// first call still working, as the last refresh read them.
	answers []answer
}

// answer is one answer of a resumable task: a reply (or the run's end)
// and the calls it answered, given to the model as one result.
type answer struct {
	status, text string
	calls        int
}

// undelivered lists the answers the model has not had.
func (t *Task) undelivered() []answer {
	seen := 0
	for i, a := range t.answers {
		if seen+a.calls > t.DeliveredCalls {
			return t.answers[i:]
		}
		seen += a.calls
	}
	return nil
}

// hasResult reports whether the task has a result the model has not
// had; cancelled work never reports back.
func (t *Task) hasResult() bool {
	if t.CancelReason != "" {
		return false
	}
	if t.Resumable {
		for _, a := range t.undelivered() {
			if a.status != Cancelled {
				return true
			}
		}
		return false
	}
	return t.Status != Working && !t.Delivered
}

// record is what the store keeps of a session.
type record struct {
	ID    string  `json:"id"`
	Tasks []*Task `json:"tasks"`
	// Changes counts changes to the set of tasks; Noted is the change the
	// last [Tasks] note showed.
	Changes int `json:"changes"`
	Noted   int `json:"noted"`
	// The event stream: the latest events, the last sequence number, and
	// the runs whose logs feed it.
	Events    []Event    `json:"events,omitempty"`
	NextEvent int        `json:"nextEvent,omitempty"`
	Runs      []*tracked `json:"runs,omitempty"`
	// Expiries are the expiries callers asked to keep, by call id
	// (expiry.go).
	Expiries map[string]Expiry `json:"expiries,omitempty"`
	// Delivery is the last message Deliver gave, by its key.
	Delivery *delivery `json:"delivery,omitempty"`
}

// Manager opens sessions on a host.
type Manager struct {
	h  *host.Host
	st store.Store
	mu sync.Mutex
	m  map[string]*Session
	// ctx is where task runs are driven; Close stops them (they resume
	// with the host's recovery).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	exp    expiries
	// byRun are the open sessions by the runs they track, for Publish
	// (under mu).
	byRun map[string]*Session
}

// NewManager makes a manager over a host.
func NewManager(h *host.Host) *Manager {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{h: h, st: h.Store(), m: map[string]*Session{}, ctx: ctx, cancel: cancel}
	register(m)
	return m
}

// Close stops driving task runs and waits for the drivers to return.
func (m *Manager) Close() {
	unregister(m)
	m.cancel()
	m.wg.Wait()
}

var sessionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Open returns the session with that id, loading its record, or a new one.
func (m *Manager) Open(ctx context.Context, id string) (*Session, error) {
	if !sessionID.MatchString(id) {
		return nil, &Error{CodeBadRequest, fmt.Sprintf("a session id is 1-128 letters, digits, '_', '.', ':' or '-', not %q", id)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.m[id]; s != nil {
		return s, nil
	}
	s := &Session{m: m, rec: record{ID: id}}
	raw, err := m.st.Session(ctx, id)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &s.rec); err != nil {
			return nil, fmt.Errorf("session %s: the stored record is damaged: %w", id, err)
		}
	case !errors.Is(err, store.ErrSessionNotFound):
		return nil, err
	}
	m.m[id] = s
	for _, tr := range s.rec.Runs {
		if !tr.Ended {
			if m.byRun == nil {
				m.byRun = map[string]*Session{}
			}
			m.byRun[tr.RunID] = s
		}
	}
	return s, nil
}

// Session is one conversation's tools and tasks. It is safe for
// concurrent use.
type Session struct {
	m   *Manager
	mu  sync.Mutex
	rec record
	// awaiting are the runs of execute calls the turn waits on.
	awaiting map[string]bool
	// watchers are the event stream's watchers (Watch).
	watchers map[chan struct{}]bool
	// live are the latest live events (model.delta), which are not
	// stored: see EventsSince.
	live []Event
	// starting are the runs of tasks whose first drive has not returned.
	// Their state is not read until it has: the host reads a run under
	// its lock until the drive's first commit, so reading one would make
	// the call that started it (and every other call of the session)
	// wait for the run's whole first activation; until that commit there
	// is nothing new to read. See RATIONALE.md, "Why does a session not
	// read a task's run during its first drive?".
	starting map[string]bool
	// version counts the record's saved changes (under mu); writing is
	// held by the one save that writes the record to the store, and
	// stored is the version the store has (under writing).
	version uint64
	// reserved counts the tasks whose runs are being created: they count
	// toward MaxWorkingTasks.
	reserved int
	writing  sync.Mutex
	stored   uint64
}

// ID is the session's id.
func (s *Session) ID() string { return s.rec.ID }

// save returns once the record, as it is now or later, is durable;
// callers hold s.mu, which save releases while it waits and holds again
// when it returns. Saves that wait together share one write: each waits
// for the write in flight, then the first of them writes the record as
// it is by then, which covers the others' changes. See RATIONALE.md,
// "Why do a session's saves share writes?".
func (s *Session) save(ctx context.Context) error {
	s.version++
	v := s.version
	s.mu.Unlock()
	defer s.mu.Lock()
	s.writing.Lock()
	defer s.writing.Unlock()
	if s.stored >= v {
		return nil // a write since this change carried it
	}
	s.mu.Lock()
	rec := s.rec
	rec.Events = s.kept()
	raw, err := json.Marshal(rec)
	upTo := s.version
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.m.st.PutSession(context.WithoutCancel(ctx), s.rec.ID, raw); err != nil {
		return err
	}
	s.stored = upTo
	return nil
}

// Tools lists what the model may call: the host's tools, and task_wait
// and task_cancel when a tool runs as a task. A serve tool's input gets
// an optional taskId, explained in its description.
func (s *Session) Tools(ctx context.Context) ([]host.Tool, error) {
	tools, err := s.m.h.Tools(ctx)
	if err != nil {
		return nil, err
	}
	tasks := false
	for i, t := range tools {
		tasks = tasks || t.Entry == host.EntryTask || t.Entry == host.EntryServe
		if t.Entry == host.EntryServe {
			tools[i] = withTaskID(t)
		}
	}
	if tasks {
		return append(tools, taskWaitSpec, taskCancelSpec), nil
	}
	return tools, nil
}

// withTaskID adds the optional taskId to a serve tool's input schema.
func withTaskID(t host.Tool) host.Tool {
	var sch map[string]any
	if json.Unmarshal(t.InputSchema, &sch) != nil {
		return t
	}
	props, _ := sch["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props["taskId"] = map[string]any{"type": "string",
		"description": "The id of a task this tool started, to send it this call; leave it out to start a new task."}
	sch["properties"] = props
	t.InputSchema, _ = json.Marshal(sch)
	t.Description += "\n\nEach call without a taskId starts a task that keeps its state; call again with its taskId to send it more work."
	return t
}

var (
	taskWaitSpec = host.Tool{Name: TaskWaitTool, Entry: host.EntryExecute,
		Description: "Wait until a task has a result, a new message arrives, or timeoutSeconds pass. Call it sparingly: only when you deliberately want to say nothing to the user until a task's result arrives. Tasks keep running, and their results reach you without this call.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"timeoutSeconds":{"type":"integer","minimum":1}},"additionalProperties":false}`)}
	taskCancelSpec = host.Tool{Name: TaskCancelTool, Entry: host.EntryExecute,
		Description: "Stop a task's current work. Cancelled work never reports back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"taskId":{"type":"string"}},"required":["taskId"],"additionalProperties":false}`)}
)

// CallOptions are a call's options.
type CallOptions struct {
	// TaskID sends the call to a resumable task.
	TaskID string
	// Tool, when set, is the tool the caller already resolved the call's
	// name to (an entry of Tools): the session does not read the host's
	// plugins again to learn its entry. Start still runs the latest
	// version.
	Tool *host.Tool
	// Expiry, for a task call, is kept with the task's call, in the same
	// write (Manager.Expiry reads it).
	Expiry *Expiry
	// NewTaskID names the task a task tool's call starts (a random id
	// when empty). A call whose task the session has already is answered
	// with that task's receipt and starts nothing: a caller that retries
	// a call it cannot tell went through starts its task once.
	NewTaskID string
}

// CallResult is what a call gives the model.
type CallResult struct {
	// Text is the tool result the model reads: the output as JSON, the
	// error's message, a task's receipt, or task_wait's and task_cancel's
	// answers.
	Text string
	// Status is completed or failed for a call that ended, started for a
	// task, or waiting for an execute call whose run waits (the turn
	// waits with it: Await it).
	Status string
	// TaskID is the task a task call started.
	TaskID string
	// Run is the run behind the call, when there is one.
	Run host.RunInfo
}

// Call calls a tool for the model: task_wait and task_cancel, an execute
// tool (the result, or a waiting run to Await), or a task tool (a receipt
// at once; the result comes later from Results).
func (s *Session) Call(ctx context.Context, tool string, input json.RawMessage, opts *CallOptions) (CallResult, error) {
	var o CallOptions
	if opts != nil {
		o = *opts
	}
	switch tool {
	case TaskWaitTool:
		var in struct {
			TimeoutSeconds *json.Number `json:"timeoutSeconds"`
		}
		if err := strictJSON(input, &in); err != nil {
			return CallResult{}, &Error{CodeBadRequest, "task_wait: " + err.Error()}
		}
		var timeout time.Duration
		if in.TimeoutSeconds != nil {
			n, err := in.TimeoutSeconds.Int64()
			if err != nil || n < 1 {
				return CallResult{}, &Error{CodeBadRequest, fmt.Sprintf("task_wait: timeoutSeconds must be a whole number of at least 1, not %s", *in.TimeoutSeconds)}
			}
			timeout = time.Duration(n) * time.Second
		}
		text, err := s.TaskWait(ctx, timeout)
		return CallResult{Text: text, Status: Completed}, err
	case TaskCancelTool:
		var in struct {
			TaskID string `json:"taskId"`
		}
		if err := strictJSON(input, &in); err != nil || in.TaskID == "" {
			return CallResult{}, &Error{CodeBadRequest, "task_cancel takes {\"taskId\": \"...\"}"}
		}
		text, err := s.TaskCancel(ctx, in.TaskID)
		return CallResult{Text: text, Status: Completed}, err
	}
	t, err := s.tool(ctx, tool, o.Tool)
	if err != nil {
		return CallResult{}, err
	}
	if t.Entry == host.EntryServe {
		// The model names the task in the input.
		var in map[string]json.RawMessage
		if json.Unmarshal(input, &in) == nil && in["taskId"] != nil {
			var id string
			if json.Unmarshal(in["taskId"], &id) != nil {
				return CallResult{}, &Error{CodeBadRequest, fmt.Sprintf("%s: taskId must be a string", tool)}
			}
			if o.TaskID == "" {
				o.TaskID = id
			}
			delete(in, "taskId")
			input, _ = json.Marshal(in)
		}
	}
	if o.TaskID != "" {
		return s.sendToTask(ctx, o.TaskID, t, input, o.Expiry)
	}
	if t.Entry == host.EntryExecute {
		ri, err := s.m.h.Call(ctx, tool, input, nil)
		if err != nil {
			return CallResult{}, err
		}
		s.mu.Lock()
		if !ri.Status.Terminal() {
			if s.awaiting == nil {
				s.awaiting = map[string]bool{}
			}
			s.awaiting[ri.ID] = true
		}
		s.emit(Event{Type: EvCallStarted, CallID: ri.ID, RunID: ri.ID, Tool: tool})
		s.track(ri.ID, "", tool, false)
		s.sync(ctx)
		err = s.save(ctx)
		s.mu.Unlock()
		return callResult(ri), err
	}
	return s.startTask(ctx, t, input, o.Expiry, o.NewTaskID)
}

// Task returns the session's task with that id.
func (s *Session) Task(ctx context.Context, id string) (Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	t := s.task(id)
	if t == nil {
		return Task{}, false
	}
	return *t, true
}

func (s *Session) tool(ctx context.Context, name string, known *host.Tool) (host.Tool, error) {
	if known != nil && known.Name == name {
		return *known, nil
	}
	tools, err := s.m.h.Tools(ctx)
	if err != nil {
		return host.Tool{}, err
	}
	for _, t := range tools {
		if t.Name == name {
			return t, nil
		}
	}
	return host.Tool{}, fmt.Errorf("%w: %q", host.ErrUnknownTool, name)
}

// sendToTask sends a call to a task by its id: only a serve tool's
// unfinished tasks take more calls.
func (s *Session) sendToTask(ctx context.Context, taskID string, tool host.Tool, input json.RawMessage, exp *Expiry) (CallResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	t := s.task(taskID)
	if t != nil && t.Tool == tool.Name && !t.Resumable {
		return CallResult{}, &Error{CodeBadRequest, fmt.Sprintf("task %s is not resumable: %s takes one call per task; call it without a taskId to start another", taskID, tool.Name)}
	}
	if t == nil || t.Tool != tool.Name || (t.Status != Working && t.Status != Idle) {
		return CallResult{}, &Error{CodeUnknownTask, fmt.Sprintf("this session has no unfinished task %s of %s; call %s without a taskId to start one", taskID, tool.Name, tool.Name)}
	}
	if t.Status == Idle {
		if err := s.roomForOneMore(); err != nil {
			return CallResult{}, err
		}
	}
	if _, err := s.m.h.SendCall(ctx, t.RunID, fmt.Sprintf("%s:%d", t.ID, t.Calls), input); err != nil {
		if errors.Is(err, host.ErrRunEnded) {
			return CallResult{}, &Error{CodeUnknownTask, fmt.Sprintf("task %s has finished; call %s without a taskId to start another", taskID, tool.Name)}
		}
		return CallResult{}, err
	}
	callID := fmt.Sprintf("%s:%d", t.ID, t.Calls)
	t.Calls++
	t.UsedAt = time.Now().UTC()
	if t.Status != Working {
		t.Status = Working
		s.rec.Changes++
	}
	s.emit(Event{Type: EvCallStarted, CallID: callID, TaskID: t.ID, RunID: t.RunID, Tool: t.Tool})
	s.emit(Event{Type: EvTaskStarted, CallID: callID, TaskID: t.ID, RunID: t.RunID, Tool: t.Tool, Kind: "tool"})
	s.expire(callID, exp)
	s.drive(t.RunID, false) // as startTask: the run does not wait for the write
	if err := s.save(ctx); err != nil {
		return CallResult{}, err
	}
	return CallResult{Status: "sent", TaskID: t.ID,
		Text: fmt.Sprintf("Sent to task %s. Its reply will arrive in a <task_result> message.", t.ID)}, nil
}

// roomForOneMore refuses a task that would be working past
// MaxWorkingTasks; callers hold s.mu.
func (s *Session) roomForOneMore() error {
	var working []string
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			working = append(working, t.ID)
		}
	}
	if n := len(working) + s.reserved; n >= MaxWorkingTasks {
		return &Error{CodeTooManyTasks, fmt.Sprintf("this session already runs %d tasks, the most it may (%s); wait for one with task_wait, or stop one with task_cancel",
			n, strings.Join(working, ", "))}
	}
	return nil
}

// drive runs a task's run in the background until it waits or ends; a
// first drive marks the run starting until it returns, then wakes the
// session's watchers and waiters to read it.
func (s *Session) drive(runID string, first bool) {
	if first {
		if s.starting == nil {
			s.starting = map[string]bool{}
		}
		s.starting[runID] = true // callers hold s.mu
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		_, _ = s.m.h.Drive(s.m.ctx, runID)
		if first {
			s.mu.Lock()
			delete(s.starting, runID)
			s.notify()
			s.mu.Unlock()
		}
	}()
}

func (s *Session) task(id string) *Task {
	for _, t := range s.rec.Tasks {
		if t.ID == id {
			return t
		}
	}
	return nil
}

// startTask starts a task's run, drives it in the background, and returns
// the receipt.
func (s *Session) startTask(ctx context.Context, tool host.Tool, input json.RawMessage, exp *Expiry, named string) (CallResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	if t := s.task(named); named != "" && t != nil {
		ri, err := s.m.h.Run(ctx, t.RunID)
		return CallResult{Status: "started", TaskID: t.ID, Run: ri, Text: receipt(tool, t.ID)}, err
	}
	if err := s.roomForOneMore(); err != nil {
		return CallResult{}, err
	}
	// The run's creation (a commit) does not hold the session: its place
	// is reserved, so that calls made together create their runs together.
	s.reserved++
	s.mu.Unlock()
	id, ri, err := s.startRun(ctx, tool.Name, input, named)
	s.mu.Lock()
	s.reserved--
	if t := s.task(named); named != "" && t != nil && err == nil {
		// Another attempt of the same call recorded it meanwhile; its
		// receipt waits for the record as that attempt's does.
		if err := s.save(ctx); err != nil {
			return CallResult{}, err
		}
		return CallResult{Status: "started", TaskID: t.ID, Run: ri, Text: receipt(tool, t.ID)}, nil
	}
	if err != nil {
		return CallResult{}, err
	}
	now := time.Now().UTC()
	t := &Task{ID: id, Tool: tool.Name, RunID: ri.ID, Status: Working, StartedAt: now}
	text := receipt(tool, id)
	if tool.Entry == host.EntryServe {
		t.Resumable, t.Calls, t.UsedAt = true, 1, now
	}
	s.rec.Tasks = append(s.rec.Tasks, t)
	s.rec.Changes++
	s.emit(Event{Type: EvCallStarted, CallID: ri.ID, TaskID: id, RunID: ri.ID, Tool: tool.Name})
	s.emit(Event{Type: EvTaskStarted, CallID: ri.ID, TaskID: id, RunID: ri.ID, Tool: tool.Name, Kind: "tool"})
	s.track(ri.ID, id, tool.Name, tool.Entry == host.EntryServe)
	s.expire(id, exp)
	// The run goes on while the record is written: the receipt waits for
	// the write, not the run for it. See RATIONALE.md, "Why does a task's
	// run start before its session's record is written?".
	s.drive(ri.ID, true)
	if err := s.save(ctx); err != nil {
		return CallResult{}, err
	}
	return CallResult{Status: "started", TaskID: id, Run: ri, Text: text}, nil
}

// startRun creates a task's run: under the name the caller gave, or else
// under a new task id. A named run that exists already was started by an
// attempt that did not get to record the task, and is that task's.
func (s *Session) startRun(ctx context.Context, tool string, input json.RawMessage, named string) (string, host.RunInfo, error) {
	var id string
	var ri host.RunInfo
	var err error
	for range 3 { // a taken id is a one-in-two-billion chance; try another
		id = tool + "-" + randomSuffix()
		if named != "" {
			id = named
		}
		ri, err = s.m.h.Start(ctx, tool, input, &host.CallOptions{RunID: id})
		if named != "" && errors.Is(err, host.ErrRunExists) {
			ri, err = s.m.h.Run(ctx, id)
		}
		if !errors.Is(err, host.ErrRunExists) {
			break
		}
	}
	return id, ri, err
}
// receipt is what a task's call answers.
func receipt(tool host.Tool, id string) string {
	text := fmt.Sprintf("Started task %s. Its result will arrive in a <task_result> message.", id)
	if tool.Entry == host.EntryServe {
		text += fmt.Sprintf(" To send it another message, call %s again with taskId %s.", tool.Name, id)
	}
	return text
}

// randomSuffix is the six characters of a task id.
func randomSuffix() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func callResult(ri host.RunInfo) CallResult {
	if ri.Aborted == "steer" && (ri.Status == store.StatusFailed || ri.Status == store.StatusCancelled) {
		// A body that rejects after a steer is interrupted.
		return CallResult{Text: `{"interrupted":true}`, Status: Completed, Run: ri}
	}
	switch ri.Status {
	case store.StatusCompleted:
		return CallResult{Text: compactJSON(ri.Result), Status: Completed, Run: ri}
	case store.StatusFailed, store.StatusCancelled:
		return CallResult{Text: errorText(ri), Status: Failed, Run: ri}
	}
	return CallResult{Status: "waiting", Run: ri}
}

// Await waits for an execute call's run to end and returns its result.
func (s *Session) Await(ctx context.Context, runID string) (CallResult, error) {
	for {
		changed, stop := s.m.h.Watch(runID)
		ri, err := s.m.h.Run(ctx, runID)
		if err != nil {
			stop()
			return CallResult{}, err
		}
		if ri.Status.Terminal() {
			stop()
			s.mu.Lock()
			delete(s.awaiting, runID)
			s.mu.Unlock()
			return callResult(ri), nil
		}
		select {
		case <-changed:
			stop()
		case <-ctx.Done():
			stop()
			return CallResult{}, ctx.Err()
		}
	}
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func errorText(ri host.RunInfo) string {
	if ri.Status == store.StatusCancelled {
		return "the call was cancelled"
	}
	if ri.Error == nil || ri.Error.Message == "" {
		return "the call failed"
	}
	return ri.Error.Message
}

// refresh reads the state of every unfinished task's run, and what the
// session's runs logged into its events; callers hold s.mu.
func (s *Session) refresh(ctx context.Context) {
	defer s.sync(ctx)
	for _, t := range s.rec.Tasks {
		open := t.Status == Working || t.Status == Idle
		// A finished resumable task's answers are read again until the
		// model has had them: they are not kept in the session's record.
		if !open && !(t.Resumable && !t.Delivered && t.answers == nil) || s.starting[t.RunID] {
			continue
		}
		ri, err := s.m.h.Run(ctx, t.RunID)
		if err != nil {
			continue
		}
		if t.Resumable {
			t.answers = answersOf(ri)
			if !open {
				continue
			}
			if !ri.Status.Terminal() {
				st := Idle
				if ri.Working() {
					st = Working
				}
				if st != t.Status {
					t.Status = st
					s.rec.Changes++
				}
				continue
			}
		}
		if !ri.Status.Terminal() {
			continue
		}
		switch ri.Status {
		case store.StatusCompleted:
			t.Status, t.Output = Completed, compactJSON(ri.Result)
		default:
			t.Status, t.Output = Failed, errorText(ri)
			if ri.Status == store.StatusCancelled {
				t.Status = Cancelled
			}
		}
		t.SettledAt = time.Now().UTC()
		s.rec.Changes++
	}
}

// answersOf reads a serve run's answers: its answered calls in order, up
// to the first still working, those answered together as one.
func answersOf(ri host.RunInfo) []answer {
	out := []answer{}
	for i, c := range ri.Calls {
		if c.Status == "working" {
			break
		}
		if n := len(out); n > 0 && c.Answer != 0 && ri.Calls[i-1].Answer == c.Answer {
			out[n-1].calls++
			continue
		}
		text := compactJSON(c.Output)
		if c.Status != Completed {
			text = errorText(ri)
		}
		out = append(out, answer{c.Status, text, 1})
	}
	return out
}

// Results takes the results that have not reached the model yet, as one
// message of <task_result> blocks (empty when there is none). Each result
// is given once; together they share ResultBytes and ResultLines, past
// which the text is cut and marked [truncated].
func (s *Session) Results(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text, taken := s.takeResults(ctx)
	if taken {
		if err := s.save(ctx); err != nil {
			return "", err
		}
	}
	return text, nil
}

// takeResults marks the results that have not reached the model
// delivered and returns their message, and whether it marked any;
// callers hold s.mu and save.
func (s *Session) takeResults(ctx context.Context) (string, bool) {
	s.refresh(ctx)
	var b strings.Builder
	bytesLeft, linesLeft := ResultBytes, ResultLines
	taken := false
	block := func(t *Task, status, text string) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, `<task_result id="%s" tool="%s" status="%s">`, t.ID, t.Tool, status)
		body, cut := clip(text, &bytesLeft, &linesLeft)
		b.WriteString(body)
		if cut {
			b.WriteString("[truncated]")
		}
		b.WriteString("</task_result>")
	}
	for _, t := range s.rec.Tasks {
		if t.Delivered {
			continue
		}
		if t.Resumable {
			// Each answer is a result of its own: a reply that answered
			// two calls is given once.
			if t.CancelReason == "" {
				for _, a := range t.undelivered() {
					taken = true
					if a.status != Cancelled {
						block(t, a.status, a.text) // cancelled work never reports back
					}
				}
				if n := callsIn(t.answers); n > t.DeliveredCalls {
					t.DeliveredCalls = n
				}
			}
			if t.Status != Working && t.Status != Idle {
				t.Delivered, taken = true, true
			}
			continue
		}
		if t.Status == Working {
			continue
		}
		t.Delivered, taken = true, true
		if t.Status == Cancelled && t.CancelReason != "" {
			continue // cancelled work never reports back
		}
		block(t, t.Status, t.Output)
	}
	return b.String(), taken
}

// clip takes as much of text as the budget allows, and says whether it
// cut.
func clip(text string, bytesLeft, linesLeft *int) (string, bool) {
	n := 0
	lines := 0
	for n < len(text) && n < *bytesLeft {
		if text[n] == '\n' {
			if lines+1 >= *linesLeft {
				break
			}
			lines++
		}
		n++
	}
	// Do not split a UTF-8 sequence.
	for n > 0 && n < len(text) && text[n]&0xC0 == 0x80 {
		n--
	}
	*bytesLeft -= n
	*linesLeft -= lines
	return text[:n], n < len(text)
}

// TaskWait parks until a task has a result, ctx is done (a new message:
// the caller cancels ctx), or timeout passes (0: no timeout); at once when
// a result is already waiting. It says which tasks settled and which still
// work; the results themselves come from Results.
func (s *Session) TaskWait(ctx context.Context, timeout time.Duration) (string, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		s.mu.Lock()
		s.refresh(ctx)
		var settled, working []*Task
		for _, t := range s.rec.Tasks {
			if t.hasResult() {
				settled = append(settled, t)
			} else if t.Status == Working {
				working = append(working, t)
			}
		}
		if len(settled) > 0 || len(working) == 0 {
			text := waitText(settled, working, 0) // reads the tasks: under s.mu
			s.mu.Unlock()
			return text, nil
		}
		// Wake on a change to any working task's run, or when a task's
		// first drive returns (the session's watchers); quit ends the
		// watchers' goroutines when this round is over.
		wake := make(chan struct{}, 1)
		if s.watchers == nil {
			s.watchers = map[chan struct{}]bool{}
		}
		s.watchers[wake] = true
		s.mu.Unlock()
		quit := make(chan struct{})
		stops := []func(){func() {
			s.mu.Lock()
			delete(s.watchers, wake)
			s.mu.Unlock()
		}}
		for _, t := range working {
			ch, stop := s.m.h.Watch(t.RunID)
			stops = append(stops, stop)
			go func() {
				select {
				case <-ch:
					select {
					case wake <- struct{}{}:
					default:
					}
				case <-quit:
				}
			}()
		}
		stopAll := func() {
			close(quit)
			for _, stop := range stops {
				stop()
			}
		}
		select {
		case <-wake:
			stopAll()
		case <-deadline:
			stopAll()
			return waitText(nil, working, timeout), nil
		case <-ctx.Done():
			stopAll()
			return waitText(nil, working, -1), ctx.Err()
		}
	}
}

// callsIn counts the calls answers answered.
func callsIn(as []answer) int {
	n := 0
	for _, a := range as {
		n += a.calls
	}
	return n
}

func waitText(settled, working []*Task, timeout time.Duration) string {
	var parts []string
	for _, t := range settled {
		status := t.Status
		if t.Resumable {
			for _, a := range t.undelivered() {
				if a.status != Cancelled {
					status = a.status
					break
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s; its result follows.", t.ID, status))
	}
	switch {
	case len(settled) > 0:
	case timeout > 0:
		parts = append(parts, fmt.Sprintf("No task settled within %d seconds.", int(timeout/time.Second)))
	case timeout < 0:
		parts = append(parts, "A new message arrived.")
	case len(working) == 0:
		return "No task is working."
	}
	if len(working) > 0 {
		ids := make([]string, len(working))
		for i, t := range working {
			ids[i] = t.ID
		}
		if len(working) == 1 {
			parts = append(parts, fmt.Sprintf("1 task is still working: %s.", ids[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d tasks are still working: %s.", len(working), strings.Join(ids, ", ")))
		}
	}
	return strings.Join(parts, " ")
}

// TaskCancel stops a task's current work; it will not report back.
func (s *Session) TaskCancel(ctx context.Context, taskID string) (string, error) {
	return s.cancel(ctx, taskID, "task_cancel")
}

func (s *Session) cancel(ctx context.Context, taskID, reason string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	t := s.task(taskID)
	if t == nil {
		return "", &Error{CodeUnknownTask, fmt.Sprintf("this session has no task %s", taskID)}
	}
	if t.Status != Working {
		return fmt.Sprintf("%s had no work to stop.", t.ID), nil
	}
	// The run's abort signal fires and its questions are withdrawn; it has
	// the host's grace period to unwind. A serve task's waiting calls end
	// as cancelled, and the task stays available if its body goes back to
	// receive().
	if _, err := s.m.h.Abort(ctx, t.RunID, reason); err != nil && !errors.Is(err, host.ErrRunEnded) {
		return "", err
	}
	s.rec.Changes++
	for _, tr := range s.rec.Runs {
		if tr.RunID == t.RunID {
			tr.CancelReason = reason
			if !t.Resumable && !tr.Muted {
				// Cancelled work never reports back: its run's end is not
				// reported either.
				tr.Muted = true
				e := Event{CallID: t.RunID, TaskID: t.ID, RunID: t.RunID, Tool: t.Tool, Status: Cancelled, Cancel: &CancelInfo{reason}}
				e.Type = EvCallSettled
				s.emit(e)
				e.Type, e.Kind = EvTaskSettled, "tool"
				s.emit(e)
			}
		}
	}
	if t.Resumable {
		t.Status = Idle
		if err := s.save(ctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("Stopped %s's current work; it won't report back. To give it new work, call %s again with taskId %s.", t.ID, t.Tool, t.ID), nil
	}
	t.Status, t.CancelReason, t.Delivered, t.SettledAt = Cancelled, reason, true, time.Now().UTC()
	if err := s.save(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("Stopped %s; it won't report back.", t.ID), nil
}

// Steer aborts the execute calls the turn waits on (Await), as a steering
// message does: each one's abortSignal fires with reason "steer", and a
// body that rejects because of it ends as {"interrupted": true}. Tasks are
// never interrupted by a steer. It returns how many calls it aborted.
func (s *Session) Steer(ctx context.Context) (int, error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.awaiting))
	for id := range s.awaiting {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	slices.Sort(ids)
	n := 0
	for _, id := range ids {
		if _, err := s.m.h.Abort(ctx, id, "steer"); err != nil {
			if errors.Is(err, host.ErrRunEnded) {
				continue
			}
			return n, err
		}
		n++
	}
	return n, nil
}

// CancelAll cancels every working task, with reason turn_cancelled (a
// cancelled turn or session) or turn_ended (a failed turn, the end of the
// session).
func (s *Session) CancelAll(ctx context.Context, reason string) error {
	s.mu.Lock()
	var ids []string
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			ids = append(ids, t.ID)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		if _, err := s.cancel(ctx, id, reason); err != nil {
			return err
		}
	}
	return nil
}

// Tasks lists the session's tasks, oldest first.
func (s *Session) Tasks(ctx context.Context) []Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	out := make([]Task, len(s.rec.Tasks))
	for i, t := range s.rec.Tasks {
		out[i] = *t
	}
	return out
}

// Note returns the [Tasks] note when the session's tasks changed since the
// last one, listing the working tasks (and the most recently used idle
// resumable ones); ok is false when nothing changed.
func (s *Session) Note(ctx context.Context) (note string, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	if s.rec.Changes == s.rec.Noted {
		return "", false, nil
	}
	var b strings.Builder
	b.WriteString("[Tasks]\n<tasks>\n")
	var idle []*Task
	for _, t := range s.rec.Tasks {
		switch t.Status {
		case Working:
			fmt.Fprintf(&b, "<task id=%q tool=%q status=\"working\"/>\n", t.ID, t.Tool)
		case Idle:
			idle = append(idle, t)
		}
	}
	b.WriteString("</tasks>")
	if len(idle) > 0 {
		// The most recently used first.
		slices.SortStableFunc(idle, func(a, b *Task) int { return b.UsedAt.Compare(a.UsedAt) })
		b.WriteString("\n<idle>\n")
		for _, t := range idle[:min(len(idle), idleInNote)] {
			fmt.Fprintf(&b, "<task id=%q tool=%q/>\n", t.ID, t.Tool)
		}
		b.WriteString("</idle>")
	}
	s.rec.Noted = s.rec.Changes
	if err := s.save(ctx); err != nil {
		return "", false, err
	}
	return b.String(), true, nil
}

// HoldTurn is what ends a turn: while tasks work, the turn does not end.
// It returns ended true when no task works; otherwise it waits as
// task_wait does until one settles (or ctx is done) and returns the
// results to give the model before it is called again.
func (s *Session) HoldTurn(ctx context.Context) (ended bool, results string, err error) {
	s.mu.Lock()
	s.refresh(ctx)
	var working []string
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			working = append(working, t.ID)
		}
	}
	if len(working) > 0 {
		s.emit(Event{Type: EvTurnWaiting, Working: working})
	}
	s.mu.Unlock()
	for {
		if _, err := s.TaskWait(ctx, 0); err != nil {
			return false, "", err
		}
		results, err := s.Results(ctx)
		if err != nil {
			return false, "", err
		}
		working := false
		for _, t := range s.Tasks(ctx) {
			working = working || t.Status == Working
		}
		if results != "" || !working {
			return !working && results == "", results, nil
		}
	}
}

func strictJSON(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}
