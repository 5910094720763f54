package host

// CancelWaiting reports whether a Cancel of run id is waiting for the run:
// from then on, the run stops at its next step boundary.
func CancelWaiting(h *Host, id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	rh := h.runs[id]
	return rh != nil && rh.cancelling.Load() > 0
}
