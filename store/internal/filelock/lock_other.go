//go:build !unix

package filelock

import (
	"os"
	"time"
)

// Lock leaves locking to bbolt where flock is not at hand.
func Lock(f *os.File, exclusive bool, timeout time.Duration) error { return nil }
