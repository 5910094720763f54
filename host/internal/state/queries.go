package state

import "github.com/sandflow/sandflow/store"

// Unwound reports whether a run that ends now ends after an abort it was
// unwinding from, and the abort's reason: the last abort was not a steer
// (a steered execute call's outcome stands), and a serve run has not gone
// back to receive since (its task stayed available, and later calls
// answer to the body's end).
func (rs *Run) Unwound() (string, bool) {
	reason, ok := rs.AbortedNow()
	return reason, ok && reason != "steer"
}

// AbortedNow reports whether the run's current work was aborted, and
// why: it has an abort, and (a serve run) has not gone back to receive
// since. Questions it asks now are withdrawn at once, and signals it
// makes have fired.
func (rs *Run) AbortedNow() (string, bool) {
	n := len(rs.Aborts)
	if n == 0 {
		return "", false
	}
	at := rs.Aborts[n-1].Seq
	for _, p := range rs.Receives {
		if rs.Op(p).Seq > at {
			return "", false
		}
	}
	return rs.Aborts[n-1].Reason, true
}

// CurrentStatus says where a run stands from its state.
func (rs *Run) CurrentStatus() store.RunStatus {
	switch {
	case rs.Status.Terminal():
		return rs.Status
	case len(rs.RunnableSteps()) > 0, len(rs.PendingAgents()) > 0, rs.Acts() == 0, rs.Satisfied(rs.Detail.Waiting):
		return store.StatusRunning
	}
	return store.StatusWaiting
}
