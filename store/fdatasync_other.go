//go:build !linux

package store

import "os"

// fdatasync syncs f; without fdatasync, with its metadata too.
func fdatasync(f *os.File) error { return f.Sync() }
