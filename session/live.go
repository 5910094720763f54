package session

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/host"
)

// Event types that a run's code publishes while it works (Publish), not
// translated from its log: a loop agent's model output as it streams, and
// its tool calls as they start and settle.
const (
	// EvModelDelta is a piece of a model's reply as it streams: live only,
	// never stored. The reply the model step recorded is the truth.
	EvModelDelta = "model.delta"
	// EvToolStarted and EvToolSettled frame a tool call of a loop agent's
	// turn; they are kept and stored as the session's other events are.
	EvToolStarted = "tool.started"
	EvToolSettled = "tool.settled"
)

// maxLive is how many of its latest live events (model.delta) a session
// keeps in memory for a reconnecting stream.
const maxLive = 1000

// ToolCall is what tool.started and tool.settled say of a tool call a
// loop agent's model made.
type ToolCall struct {
	// ID is the model's id of the call, Name the tool's name as the model
	// saw it, and RunID the run the call started (when it started one).
	ID    string `json:"id,omitempty"`
	Name  string `json:"name"`
	RunID string `json:"runId,omitempty"`
	// Status is a settled call's: completed or failed (its error then).
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Offset is a place in a session's event stream: after the event Seq,
// and after the Sub-th live event that followed it (0: none of them).
// Its text is "41" or "41.3", the id a stream gives each event.
type Offset struct {
	Seq, Sub int
}

func (o Offset) String() string {
	if o.Sub == 0 {
		return strconv.Itoa(o.Seq)
	}
	return strconv.Itoa(o.Seq) + "." + strconv.Itoa(o.Sub)
}

// ParseOffset reads an offset as Offset.String writes it.
func ParseOffset(s string) (Offset, error) {
	seq, sub, dotted := strings.Cut(s, ".")
	var o Offset
	var err error
	if o.Seq, err = strconv.Atoi(seq); err != nil || o.Seq < 0 || strings.HasPrefix(seq, "+") {
		return Offset{}, &Error{CodeBadRequest, fmt.Sprintf("event id %q is not a sequence number", s)}
	}
	if dotted {
		if o.Sub, err = strconv.Atoi(sub); err != nil || o.Sub < 1 || strings.HasPrefix(sub, "+") {
			return Offset{}, &Error{CodeBadRequest, fmt.Sprintf("event id %q is not a sequence number", s)}
		}
	}
	return o, nil
}

// Offset is where the event is in its session's stream.
func (e Event) Offset() Offset { return Offset{e.Seq, e.Sub} }

// Before reports whether o comes before p in the stream.
func (o Offset) Before(p Offset) bool { return o.Seq < p.Seq || o.Seq == p.Seq && o.Sub < p.Sub }

// managers are the process's session managers, by host, for Publish.
var managers = struct {
	sync.Mutex
	of map[*host.Host][]*Manager
}{of: map[*host.Host][]*Manager{}}

func register(m *Manager) {
	managers.Lock()
	managers.of[m.h] = append(managers.of[m.h], m)
	managers.Unlock()
}

func unregister(m *Manager) {
	managers.Lock()
	defer managers.Unlock()
	list := managers.of[m.h]
	for i, x := range list {
		if x == m {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(managers.of, m.h)
	} else {
		managers.of[m.h] = list
	}
}

// Publish gives an event of run runID, made by the run's code as it
// works rather than written to its log, to every session of this process
// on h that tracks the run (a task of the session): e's type is
// EvModelDelta, EvToolStarted or EvToolSettled, and the session fills in
// the call's ids. A run no session tracks publishes to nobody. It does
// not block on the sessions' readers. See RATIONALE.md, "Why are a loop
// agent's model deltas live session events, and not stored?".
func Publish(h *host.Host, runID string, e Event) {
	managers.Lock()
	list := append([]*Manager(nil), managers.of[h]...)
	managers.Unlock()
	for _, m := range list {
		m.mu.Lock()
		ss := m.byRun[runID]
		m.mu.Unlock()
		if ss != nil {
			ss.publish(runID, e)
		}
	}
}

// follow notes that s tracks a run, for Publish.
func (m *Manager) follow(runID string, s *Session) {
	m.mu.Lock()
	if m.byRun == nil {
		m.byRun = map[string]*Session{}
	}
	m.byRun[runID] = s
	m.mu.Unlock()
}

// publish adds a published event to the session's stream: a delta to
// the live events, after the latest kept event, a tool call's start or
// end to the kept ones.
func (s *Session) publish(runID string, e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var tr *tracked
	for _, x := range s.rec.Runs {
		if x.RunID == runID {
			tr = x
		}
	}
	if tr == nil {
		return
	}
	e.CallID, e.TaskID, e.RunID, e.Tool = tr.RunID, tr.TaskID, tr.RunID, tr.Tool
	n := len(s.live)
	if e.Type != EvModelDelta || n == 0 || s.live[n-1].Step != e.Step {
		// What the run logged before it made this event comes first: a
		// tool call's progress before its start, say. Within a model
		// step's stream the run logs nothing.
		s.sync(s.m.ctx)
	}
	if e.Type != EvModelDelta {
		s.emit(e)
		return
	}
	last := Offset{Seq: s.rec.NextEvent}
	if n > 0 && s.live[n-1].Seq == last.Seq {
		last.Sub = s.live[n-1].Sub
	}
	e.Seq, e.Sub = last.Seq, last.Sub+1
	e.Time = time.Now().UTC()
	s.live = append(s.live, e)
	if n := len(s.live); n > 2*maxLive {
		s.live = append(s.live[:0:0], s.live[n-maxLive:]...)
	}
	s.notify()
}

// EventsSince returns the session's events after from, kept and live
// ones in stream order, having read what its runs logged since the last
// call and stored what it keeps: a live event is never given before the
// kept events it follows are stored. After a restart, or past the live
// events kept in memory, only kept events come back.
func (s *Session) EventsSince(ctx context.Context, from Offset) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sync(ctx)
	_ = s.save(ctx)
	kept := s.kept()
	i := len(kept)
	for i > 0 && from.Before(kept[i-1].Offset()) {
		i--
	}
	live := s.live
	if n := len(live); n > maxLive {
		live = live[n-maxLive:]
	}
	j := len(live)
	for j > 0 && from.Before(live[j-1].Offset()) {
		j--
	}
	out := make([]Event, 0, len(kept)-i+len(live)-j)
	a, b := kept[i:], live[j:]
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || len(a) > 0 && a[0].Offset().Before(b[0].Offset()) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}
