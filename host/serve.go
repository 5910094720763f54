package host

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
)

// SendCall sends another call to a serve run (a call with a
// taskId): the input is checked against the tool's input schema and
// recorded as the run's next call, which the body's next receive takes.
// It does not run the run: the caller does (Drive). It returns the call's
// index; the call that started the run is call 0.
//
// Errors, each leaving everything unchanged: ErrRunNotFound; ErrRunEnded
// when the run has ended (its task finished); ErrBadInput when the run's
// tool is not a serve tool or the input is not a JSON object; an
// *InputError when the input fails the schema; a *LimitError when the
// input is too large or the run's log is full.
func (h *Host) SendCall(ctx context.Context, runID, callID string, input json.RawMessage) (int, error) {
	index := 0
	_, err := h.withRun(ctx, runID, func(rh *runHandle) error {
		rs := rh.rs
		if rs.Status.Terminal() {
			return fmt.Errorf("%w: %s is %s", ErrRunEnded, runID, rs.Status)
		}
		lp, err := h.plugin(ctx, rs.Rec.Plugin, rs.Rec.Version)
		if err != nil {
			return err
		}
		if lp.m.Entry != EntryServe {
			return fmt.Errorf("%w: %s is a run of %s, whose entry is %s: only a serve tool's run takes more calls", ErrBadInput, runID, lp.m.Name, lp.m.Entry)
		}
		in, err := lp.checkInput(input)
		if err != nil {
			return err
		}
		if rs.LastSeq >= uint64(lp.limits.Events) {
			return &LimitError{Limit: "events", Max: int64(lp.limits.Events), What: "run " + rs.ID}
		}
		if callID == "" {
			callID = fmt.Sprintf("%s:%d", runID, len(rs.Calls))
		}
		index = len(rs.Calls)
		b := newBatch(rs)
		if _, err := b.push(EvCallReceived, &history.Data{Index: index, CallID: callID, Input: in}); err != nil {
			return err
		}
		return h.commit(ctx, rh, b, nil)
	})
	return index, err
}
