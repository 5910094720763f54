//go:build cgo

package host

// WasmtimeCacheStats reports how often e's Compile loaded an artifact from
// its cache directory, compiled because there was none, and found one that
// did not load (and replaced it).
func WasmtimeCacheStats(e *WasmtimeEngine) (hits, misses, corrupt int64) {
	return e.CacheStats()
}
