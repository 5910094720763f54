package host

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"strconv"
	"strings"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// A server answers a request once what it asked for is committed, and
// not before: RecordAnswer and RecordWithdraw commit a question's
// settlement on its own and return, leaving the run for the caller to
// drive (Drive), the way DeliverHook does for a hook. AnswerAsk, for a
// caller that waits for the run anyway, stores the answer with the
// activation it wakes instead, in one commit.

// RecordAnswer answers an open question and commits the answer, without
// running the run: the caller continues it with Drive (after a crash,
// recovery does). It returns the run as committed, status running.
//
// Errors, each leaving everything unchanged: AnswerAsk's (ErrUnknownAsk,
// ErrAskClosed, ErrBadAnswer, a *LimitError for text over the payload
// limit).
func (h *Host) RecordAnswer(ctx context.Context, askID string, a Answer) (RunInfo, error) {
	return h.recordSettle(ctx, askID, func(req abi.AskRequest, l Limits) (abi.AskAnswer, error) {
		return checkAnswer(req, a, l.PayloadBytes)
	})
}

// RecordWithdraw withdraws an open question and commits that, without
// running the run (see RecordAnswer). Errors: ErrUnknownAsk, ErrAskClosed.
func (h *Host) RecordWithdraw(ctx context.Context, askID string) (RunInfo, error) {
	return h.recordSettle(ctx, askID, func(abi.AskRequest, Limits) (abi.AskAnswer, error) {
		return abi.AskAnswer{Status: abi.AnswerCancelled}, nil
	})
}

func (h *Host) recordSettle(ctx context.Context, askID string, decide func(abi.AskRequest, Limits) (abi.AskAnswer, error)) (RunInfo, error) {
	ask, err := h.openAsk(ctx, askID)
	if err != nil {
		return RunInfo{}, err
	}
	info, err := h.withRun(ctx, ask.RunID, func(rh *runHandle) error {
		b, err := h.settleBatch(ctx, rh, ask, decide)
		if err != nil {
			return err
		}
		return h.commit(ctx, rh, b, nil)
	})
	if err != nil {
		return RunInfo{}, err
	}
	return info, nil
}

// openAsk loads a question that is open in the store.
func (h *Host) openAsk(ctx context.Context, askID string) (store.Ask, error) {
	ask, err := h.store.Ask(ctx, askID)
	if err != nil {
		if errors.Is(err, store.ErrAskNotFound) {
			return store.Ask{}, fmt.Errorf("%w: %s", ErrUnknownAsk, askID)
		}
		return store.Ask{}, err
	}
	if !ask.Open {
		return store.Ask{}, fmt.Errorf("%w: %s", ErrAskClosed, askID)
	}
	return ask, nil
}

// settleBatch checks, under the run's lock, that the question is still
// open in the run's state and that decide accepts the answer, and makes
// the batch that settles it. Nothing is applied when it fails.
func (h *Host) settleBatch(ctx context.Context, rh *runHandle, ask store.Ask, decide func(abi.AskRequest, Limits) (abi.AskAnswer, error)) (*batch, error) {
	rs := rh.rs
	o := rs.Op(ask.Position)
	if o == nil || o.Kind != abi.OpAsk || o.AskID != ask.ID {
		return nil, fmt.Errorf("%w: %s is not in run %s's log", ErrUnknownAsk, ask.ID, ask.RunID)
	}
	if o.Settled || rs.Status.Terminal() {
		return nil, fmt.Errorf("%w: %s", ErrAskClosed, ask.ID)
	}
	req, err := state.AskRequest(o)
	if err != nil {
		return nil, fmt.Errorf("%w: question %s: %v", ErrBadHistory, ask.ID, err)
	}
	ans, err := decide(*req, h.limitsOf(ctx, rs))
	if err != nil {
		return nil, err
	}
	b := newBatch(rs)
	if _, err := b.push(EvAskSettled, &history.Data{Op: ask.Position, AskID: ask.ID, Answer: &ans}); err != nil {
		return nil, err
	}
	b.b.PutAsks = append(b.b.PutAsks, closedAsk(rs, o, ask.Position))
	return b, nil
}

// AgentTurnRecorded says whether the agent turn turnID (runID:position,
// AgentTurn.TurnID) has nothing left to commit: its outcome is in the
// run's committed log, or the run has ended. A server that handed a
// turn's result to its backend waits for this before acknowledging it.
//
// Errors: ErrRunNotFound; ErrBadInput when turnID is not runID:position.
func (h *Host) AgentTurnRecorded(ctx context.Context, turnID string) (bool, error) {
	i := strings.LastIndexByte(turnID, ':')
	p, err := strconv.ParseUint(turnID[i+1:], 10, 32)
	if i <= 0 || err != nil || p == 0 {
		return false, fmt.Errorf("%w: turn id %.64q is not runID:position", ErrBadInput, turnID)
	}
	recorded := false
	_, err = h.withRun(ctx, turnID[:i], func(rh *runHandle) error {
		// Under the run's lock nothing is carried: the state is what is
		// committed.
		o := rh.rs.Op(uint32(p))
		recorded = rh.rs.Status.Terminal() || (o != nil && o.Kind == abi.OpAgent && o.Settled)
		return nil
	})
	return recorded, err
}
