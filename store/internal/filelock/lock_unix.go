//go:build unix

package filelock

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// Lock takes f's lock as bbolt does (flock, exclusive to write,
// shared to read), retrying until timeout, so that the file is checked
// (the store's page check) with no writer in it. bbolt, handed the same
// open file, takes the lock again, which the holder of it is granted at
// once.
func Lock(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return ErrLocked
		}
		time.Sleep(50 * time.Millisecond)
	}
}
