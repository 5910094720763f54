//go:build !linux

package worker

// setAddressSpaceLimit does nothing here: only the heap limit applies.
func setAddressSpaceLimit(int64) {}

func RSSBytes(int) int64 { return 0 }
