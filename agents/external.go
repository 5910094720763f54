package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// External hands agent turns to a platform that runs its own agents: each
// turn becomes a work item that the platform lists, claims, and completes
// with a reply (or structured data) or fails, through the HTTP API or these
// methods. The run waits, holding no instance, until it does.
//
// Work items live in memory. The host sends a turn again under the same
// turn id after a restart, so the item reappears; a platform that
// completes an item whose turn was already completed gets ErrUnknownItem.
type External struct {
	list []host.AgentInfo
	// Lease is how long a claim holds an item before another worker may
	// claim it (5 minutes when zero).
	Lease time.Duration

	mu    sync.Mutex
	items map[string]*item
	// changed is closed and replaced whenever items change, for waiters.
	changed chan struct{}
}

// WorkItem is one agent turn waiting for the platform.
type WorkItem struct {
	// ID is the turn id, run_id:position: stable across the host's
	// retries, so it doubles as an idempotency key.
	ID           string          `json:"id"`
	RunID        string          `json:"runId"`
	Agent        string          `json:"agent"`
	Message      string          `json:"message"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	CreatedAt    time.Time       `json:"createdAt"`
	// ClaimedBy and LeaseUntil are set while a worker holds the item.
	ClaimedBy  string     `json:"claimedBy,omitempty"`
	LeaseUntil *time.Time `json:"leaseUntil,omitempty"`
}

type item struct {
	WorkItem
	// done is closed when res is set.
	done chan struct{}
	res  abi.AgentResult
	// waiting counts the Turn calls waiting on the item.
	waiting int
}

// Errors of the work-item methods.
var (
	// ErrUnknownItem: no work item has that id (it was completed, or its
	// run stopped waiting).
	ErrUnknownItem = errors.New("no such agent work item")
	// ErrClaimed: another worker holds the item's lease.
	ErrClaimed = errors.New("the work item is claimed by another worker")
	// ErrBadResult: a completion that is neither a reply nor JSON data.
	ErrBadResult = errors.New("bad work item result")
)

var _ host.AgentBackend = (*External)(nil)

// NewExternal makes an external backend for the listed agents.
func NewExternal(list []host.AgentInfo) *External {
	return &External{list: list, items: map[string]*item{}, changed: make(chan struct{})}
}

// Agents implements host.AgentBackend.
func (e *External) Agents(context.Context) ([]host.AgentInfo, error) { return e.list, nil }

func (e *External) known(agent string) bool {
	for _, a := range e.list {
		if a.Name == agent {
			return true
		}
	}
	return false
}

// Turn implements host.AgentBackend: it posts the work item and waits for
// its completion.
func (e *External) Turn(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
	if !e.known(t.Agent) {
		return failed(abi.AgentErrUnavailable, "no agent is called %q", t.Agent), nil
	}
	e.mu.Lock()
	it := e.items[t.TurnID]
	if it == nil {
		it = &item{WorkItem: WorkItem{ID: t.TurnID, RunID: t.RunID, Agent: t.Agent, Message: t.Message,
			OutputSchema: t.OutputSchema, CreatedAt: time.Now().UTC()}, done: make(chan struct{})}
		e.items[t.TurnID] = it
		e.notify()
	}
	it.waiting++
	e.mu.Unlock()
	select {
	case <-it.done:
		return it.res, nil
	case <-ctx.Done():
		e.mu.Lock()
		if it.waiting--; it.waiting == 0 && e.items[t.TurnID] == it {
			// Nobody waits for it any more: the run was stopped, or the
			// host is closing (and will send the turn again).
			delete(e.items, t.TurnID)
			e.notify()
		}
		e.mu.Unlock()
		return abi.AgentResult{}, ctx.Err()
	}
}

func (e *External) notify() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// Items lists the work items, oldest first: of one agent, or of all when
// agent is empty; claimed ones too unless unclaimedOnly (an expired lease
// counts as unclaimed).
func (e *External) Items(agent string, unclaimedOnly bool) []WorkItem {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	var out []WorkItem
	for _, it := range e.items {
		if agent != "" && it.Agent != agent {
			continue
		}
		if unclaimedOnly && it.LeaseUntil != nil && now.Before(*it.LeaseUntil) {
			continue
		}
		out = append(out, it.WorkItem)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Wait returns a channel closed when the work items next change (for a
// long poll).
func (e *External) Wait() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Claim gives worker the item for the lease (the backend's Lease when
// lease is 0). A worker may claim again to extend its lease; another
// worker gets ErrClaimed until the lease ends.
func (e *External) Claim(id, worker string, lease time.Duration) (WorkItem, error) {
	if worker == "" {
		return WorkItem{}, fmt.Errorf("%w: a claim needs a worker name", ErrBadResult)
	}
	if lease <= 0 {
		lease = e.Lease
	}
	if lease <= 0 {
		lease = 5 * time.Minute
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	it := e.items[id]
	if it == nil {
		return WorkItem{}, fmt.Errorf("%w: %q", ErrUnknownItem, id)
	}
	now := time.Now()
	if it.ClaimedBy != "" && it.ClaimedBy != worker && it.LeaseUntil != nil && now.Before(*it.LeaseUntil) {
		return WorkItem{}, fmt.Errorf("%w: %s holds it until %s", ErrClaimed, it.ClaimedBy, it.LeaseUntil.Format(time.RFC3339))
	}
	until := now.Add(lease).UTC()
	it.ClaimedBy, it.LeaseUntil = worker, &until
	e.notify()
	return it.WorkItem, nil
}

// Complete settles an item with the turn's reply, and its structured
// output when the turn asked for one. worker, when given, must hold the
// item's lease.
func (e *External) Complete(id, worker, reply string, data json.RawMessage) error {
	if len(data) > 0 && !json.Valid(data) {
		return fmt.Errorf("%w: data is not JSON", ErrBadResult)
	}
	return e.settle(id, worker, abi.AgentResult{Status: abi.AgentCompleted, Reply: reply, Data: data})
}

// Fail settles an item as a failed turn with the platform's message.
func (e *External) Fail(id, worker, message string) error {
	if message == "" {
		message = "the agent failed"
	}
	return e.settle(id, worker, failed(abi.AgentErrFailed, "%s", message))
}

func (e *External) settle(id, worker string, res abi.AgentResult) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	it := e.items[id]
	if it == nil {
		return fmt.Errorf("%w: %q", ErrUnknownItem, id)
	}
	if worker != "" && it.ClaimedBy != "" && it.ClaimedBy != worker && it.LeaseUntil != nil && time.Now().Before(*it.LeaseUntil) {
		return fmt.Errorf("%w: %s holds it", ErrClaimed, it.ClaimedBy)
	}
	delete(e.items, id)
	it.res = res
	close(it.done)
	e.notify()
	return nil
}
