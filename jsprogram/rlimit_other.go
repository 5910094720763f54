//go:build !linux

package jsprogram

// setAddressSpaceLimit does nothing here: only the heap limit applies.
func setAddressSpaceLimit(int64) {}

func rssBytes(int) int64 { return 0 }
