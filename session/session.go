// Package session is the model-facing layer over a host: a platform's
// agent loop lists a session's tools, calls them, gets receipts for tasks
// and their results later (each once, as <task_result> blocks), waits for
// and cancels tasks with task_wait and task_cancel, and reads the [Tasks]
// note. Its texts are the spec's (spec/tasks.md).
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
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// Limits of a session (spec/tasks.md).
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
	CodeUnknownTask  = "UNKNOWN_TASK"
	CodeTooManyTasks = "TOO_MANY_TASKS"
	CodeBadRequest   = "BAD_REQUEST"
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
}

// record is what the store keeps of a session.
type record struct {
	ID    string  `json:"id"`
	Tasks []*Task `json:"tasks"`
	// Changes counts changes to the set of tasks; Noted is the change the
	// last [Tasks] note showed.
	Changes int `json:"changes"`
	Noted   int `json:"noted"`
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
}

// NewManager makes a manager over a host.
func NewManager(h *host.Host) *Manager {
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{h: h, st: h.Store(), m: map[string]*Session{}, ctx: ctx, cancel: cancel}
}

// Close stops driving task runs and waits for the drivers to return.
func (m *Manager) Close() {
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
	return s, nil
}

// Session is one conversation's tools and tasks. It is safe for
// concurrent use.
type Session struct {
	m   *Manager
	mu  sync.Mutex
	rec record
}

// ID is the session's id.
func (s *Session) ID() string { return s.rec.ID }

// save stores the record; callers hold s.mu.
func (s *Session) save(ctx context.Context) error {
	raw, err := json.Marshal(s.rec)
	if err != nil {
		return err
	}
	return s.m.st.PutSession(context.WithoutCancel(ctx), s.rec.ID, raw)
}

// Tools lists what the model may call: the host's tools, and task_wait
// and task_cancel when a tool runs as a task.
func (s *Session) Tools(ctx context.Context) ([]host.Tool, error) {
	tools, err := s.m.h.Tools(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		if t.Entry == host.EntryTask || t.Entry == host.EntryServe {
			return append(tools, taskWaitSpec, taskCancelSpec), nil
		}
	}
	return tools, nil
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
	if o.TaskID != "" {
		return s.sendToTask(o.TaskID, tool)
	}
	t, err := s.tool(ctx, tool)
	if err != nil {
		return CallResult{}, err
	}
	if t.Entry == host.EntryExecute {
		ri, err := s.m.h.Call(ctx, tool, input, nil)
		if err != nil {
			return CallResult{}, err
		}
		return callResult(ri), nil
	}
	return s.startTask(ctx, t, input)
}

func (s *Session) tool(ctx context.Context, name string) (host.Tool, error) {
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

// sendToTask answers a call that names a task: only a serve tool's tasks
// take more calls.
func (s *Session) sendToTask(taskID, tool string) (CallResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.task(taskID)
	if t == nil || t.Tool != tool {
		return CallResult{}, &Error{CodeUnknownTask, fmt.Sprintf("this session has no task %s of %s; call %s without a taskId to start one", taskID, tool, tool)}
	}
	return CallResult{}, &Error{CodeBadRequest, fmt.Sprintf("task %s is not resumable: %s takes one call per task; call it without a taskId to start another", taskID, tool)}
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
func (s *Session) startTask(ctx context.Context, tool host.Tool, input json.RawMessage) (CallResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	var working []string
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			working = append(working, t.ID)
		}
	}
	if len(working) >= MaxWorkingTasks {
		return CallResult{}, &Error{CodeTooManyTasks, fmt.Sprintf("this session already runs %d tasks, the most it may (%s); wait for one with task_wait, or stop one with task_cancel",
			len(working), strings.Join(working, ", "))}
	}
	var id string
	var ri host.RunInfo
	var err error
	for range 3 { // a taken id is a one-in-two-billion chance; try another
		id = tool.Name + "-" + randomSuffix()
		ri, err = s.m.h.Start(ctx, tool.Name, input, &host.CallOptions{RunID: id})
		if !errors.Is(err, host.ErrRunExists) {
			break
		}
	}
	if err != nil {
		return CallResult{}, err
	}
	t := &Task{ID: id, Tool: tool.Name, RunID: ri.ID, Status: Working, StartedAt: time.Now().UTC()}
	s.rec.Tasks = append(s.rec.Tasks, t)
	s.rec.Changes++
	if err := s.save(ctx); err != nil {
		return CallResult{}, err
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		_, _ = s.m.h.Drive(s.m.ctx, ri.ID)
	}()
	return CallResult{Status: "started", TaskID: id, Run: ri,
		Text: fmt.Sprintf("Started task %s. Its result will arrive in a <task_result> message.", id)}, nil
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

// refresh reads the state of every working task's run; callers hold s.mu.
func (s *Session) refresh(ctx context.Context) {
	for _, t := range s.rec.Tasks {
		if t.Status != Working {
			continue
		}
		ri, err := s.m.h.Run(ctx, t.RunID)
		if err != nil || !ri.Status.Terminal() {
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

// Results takes the results that have not reached the model yet, as one
// message of <task_result> blocks (empty when there is none). Each result
// is given once; together they share ResultBytes and ResultLines, past
// which the text is cut and marked [truncated].
func (s *Session) Results(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh(ctx)
	var b strings.Builder
	bytesLeft, linesLeft := ResultBytes, ResultLines
	taken := false
	for _, t := range s.rec.Tasks {
		if t.Status == Working || t.Delivered {
			continue
		}
		t.Delivered, taken = true, true
		if t.Status == Cancelled && t.CancelReason != "" {
			continue // cancelled work never reports back
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		open := fmt.Sprintf(`<task_result id="%s" tool="%s" status="%s">`, t.ID, t.Tool, t.Status)
		b.WriteString(open)
		body, cut := clip(t.Output, &bytesLeft, &linesLeft)
		b.WriteString(body)
		if cut {
			b.WriteString("[truncated]")
		}
		b.WriteString("</task_result>")
	}
	if taken {
		if err := s.save(ctx); err != nil {
			return "", err
		}
	}
	return b.String(), nil
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
			switch {
			case t.Status == Working:
				working = append(working, t)
			case !t.Delivered && t.CancelReason == "":
				settled = append(settled, t)
			}
		}
		s.mu.Unlock()
		if len(settled) > 0 || len(working) == 0 {
			return waitText(settled, working, 0), nil
		}
		// Wake on a change to any working task's run; quit ends the
		// watchers' goroutines when this round is over.
		wake := make(chan struct{}, 1)
		quit := make(chan struct{})
		var stops []func()
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

func waitText(settled, working []*Task, timeout time.Duration) string {
	var parts []string
	for _, t := range settled {
		parts = append(parts, fmt.Sprintf("%s %s; its result follows.", t.ID, t.Status))
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
	if _, err := s.m.h.Cancel(ctx, t.RunID, reason); err != nil && !errors.Is(err, host.ErrRunEnded) {
		return "", err
	}
	t.Status, t.CancelReason, t.Delivered, t.SettledAt = Cancelled, reason, true, time.Now().UTC()
	s.rec.Changes++
	if err := s.save(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("Stopped %s; it won't report back.", t.ID), nil
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
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			fmt.Fprintf(&b, "<task id=%q tool=%q status=\"working\"/>\n", t.ID, t.Tool)
		}
	}
	b.WriteString("</tasks>")
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
