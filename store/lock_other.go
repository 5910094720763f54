//go:build !unix

package store

import (
	"os"
	"time"
)

// lockFile leaves locking to bbolt where flock is not at hand.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error { return nil }
