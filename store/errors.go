package store

import "errors"

// Sentinel errors of the store. Compare with errors.Is.
var (
	// ErrRunExists is returned by CreateRun when the run id is taken.
	ErrRunExists = errors.New("store: run already exists")
	// ErrRunNotFound is returned when no run has the id.
	ErrRunNotFound = errors.New("store: run not found")
	// ErrSeqConflict is returned by Append when the run's log no longer ends
	// where the caller expected: another writer appended first.
	ErrSeqConflict = errors.New("store: event sequence conflict")
	// ErrBadBatch is returned when a batch's events are not numbered densely
	// from the expected sequence, or its run record does not match them.
	ErrBadBatch = errors.New("store: malformed batch")
	// ErrAskNotFound is returned when no question has the id.
	ErrAskNotFound = errors.New("store: question not found")
	// ErrHookTaken is returned by Append and CreateRun when a batch claims
	// a hook token another run holds; nothing of the batch is applied.
	ErrHookTaken = errors.New("store: hook token held by another run")
	// ErrHookNotFound is returned when no run holds the token.
	ErrHookNotFound = errors.New("store: hook token not found")
	// ErrSessionNotFound is returned for a session the store has no
	// record of.
	ErrSessionNotFound = errors.New("store: session not found")
	// ErrSnapshotNotFound is returned for a run the store keeps no
	// snapshot of.
	ErrSnapshotNotFound = errors.New("store: snapshot not found")
	// ErrStateNotFound is returned for a run the store keeps no state
	// image of.
	ErrStateNotFound = errors.New("store: state image not found")
	// ErrPluginNotFound is returned when no plugin version matches.
	ErrPluginNotFound = errors.New("store: plugin not found")
	// ErrPluginInUse is returned by DeletePluginVersion when a run that has
	// not ended is pinned to the version.
	ErrPluginInUse = errors.New("store: plugin version in use")
	// ErrModuleNotFound is returned when no module bytes have the hash.
	ErrModuleNotFound = errors.New("store: module not found")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrLocked is returned by Open when another process has the file open.
	ErrLocked = errors.New("store: database is in use by another process")
	// ErrJournalBroken is returned by every write after the store could not
	// append to its journal and leave it in a known state (a failed sync):
	// the writes that returned before are safe; reopen the store.
	ErrJournalBroken = errors.New("store: journal broken, reopen the store")
	// ErrCorrupt is returned when a stored value cannot be decoded.
	ErrCorrupt = errors.New("store: corrupt value")
)
