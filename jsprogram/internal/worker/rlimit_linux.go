package worker

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setAddressSpaceLimit caps the worker's address space at what it uses now
// plus n and some headroom for the runtime's own mappings, so that an
// allocation no garbage collection can make room for (a string of 2^40
// characters, say) fails in the kernel instead of taking the machine's
// memory. The Go runtime then dies with "out of memory", which the parent
// reports as memory_limit.
func setAddressSpaceLimit(n int64) {
	cur := vmSize()
	if cur <= 0 {
		return
	}
	lim := uint64(cur + n + addressHeadroom)
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim})
}

// addressHeadroom covers mappings that are not heap: goroutine stacks, the
// collector's metadata, arenas reserved ahead of use.
const addressHeadroom = 512 << 20

// vmSize reads this process's virtual size in bytes.
func vmSize() int64 { return statusBytes("self", "VmSize:") }

// RSSBytes reads a process's resident set size in bytes.
func RSSBytes(pid int) int64 { return statusBytes(strconv.Itoa(pid), "VmRSS:") }

// statusBytes reads a size field (in kB) of /proc/<proc>/status.
func statusBytes(proc, field string) int64 {
	b, err := os.ReadFile("/proc/" + proc + "/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(field)); ok {
			if f := bytes.Fields(v); len(f) >= 1 {
				if kb, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
