package jsprogram

// ParkedPIDs are the process ids of the workers programs are parked in,
// for tests that kill one.
func ParkedPIDs(e *Engine) []int {
	e.lot.mu.Lock()
	defer e.lot.mu.Unlock()
	var pids []int
	for el := e.lot.order.Front(); el != nil; el = el.Next() {
		pids = append(pids, el.Value.(*parkedVM).w.cmd.Process.Pid)
	}
	return pids
}
