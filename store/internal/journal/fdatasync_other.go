//go:build !linux

package journal

import "os"

// Fdatasync syncs f; without fdatasync, with its metadata too.
func Fdatasync(f *os.File) error { return f.Sync() }
