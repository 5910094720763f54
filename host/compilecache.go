package host

import "github.com/sandflow/sandflow/internal/compilecache"

// CacheFinding is a damaged compile-cache entry.
type CacheFinding = compilecache.Finding

// VerifyCache checks the compile caches under dir (a data directory's
// cache/) without changing anything: how many entries, and the damaged
// ones. A damaged entry costs a compilation; the host discards it when it
// next starts. Every entry has a sidecar, <entry>.sum, with its checksum
// and size (internal/compilecache).
func VerifyCache(dir string) (checked int, bad []CacheFinding, err error) {
	return compilecache.Scan(dir, false)
}
