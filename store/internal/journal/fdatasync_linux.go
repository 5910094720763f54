package journal

import (
	"os"
	"syscall"
)

// Fdatasync syncs f's data and the metadata needed to read it back.
func Fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
