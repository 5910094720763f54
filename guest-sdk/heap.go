package sandflow

import "runtime"

// heapReserve is how much heap the guest makes ready while it
// initialises. A Go guest's linear memory grows as its heap does, and
// memory never shrinks; the host reuses a finished run's instance for the
// next run only if its memory is still the size it had after
// initialisation (host/recycle.go). Allocating this much and collecting it
// at once leaves that many bytes of free heap in the initialised image, so
// that a run that allocates less before its first collection does not
// grow its memory, and its instance can be reused instead of a new one
// being made. The pages stay untouched until the heap uses them.
const heapReserve = 2 << 20

func init() {
	runtime.KeepAlive(make([]byte, heapReserve))
	runtime.GC()
}
