package store

import (
	"os"
	"syscall"
)

// fdatasync syncs f's data and the metadata needed to read it back.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
