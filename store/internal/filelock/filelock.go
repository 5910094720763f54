// Package filelock takes a store file's lock as bbolt does, so that the
// store can check the file before bbolt opens it.
package filelock

import "errors"

// ErrLocked is the store's ErrLocked: Lock timed out while another
// process held the file.
var ErrLocked = errors.New("store: database is in use by another process")
