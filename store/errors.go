package store

import (
	"errors"

	"github.com/sandflow/sandflow/store/internal/filelock"
	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
)

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
	ErrLocked = filelock.ErrLocked
	// ErrJournalBroken is returned by every write after the store could not
	// append to its journal and leave it in a known state (a failed sync):
	// the writes that returned before are safe; reopen the store.
	ErrJournalBroken = journal.ErrBroken
	// ErrCorrupt is matched by every *CorruptError: stored bytes are
	// damaged (a checksum that does not match, a value that does not
	// decode, a damaged page or journal record).
	ErrCorrupt = integrity.ErrCorrupt
	// ErrNotStore is matched by *NotStoreError: Open found a file that is
	// empty or of another format.
	ErrNotStore = integrity.ErrNotStore
	// ErrOldFormat is matched by *OldFormatError: the file is in a format
	// from before checksums, which Upgrade converts.
	ErrOldFormat = errors.New("store: old store format")
	// ErrReadOnly is returned by every write to a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("store: opened read-only")
	// ErrNeedsRecovery is returned by a read-only Open when the journal
	// holds writes not yet in the main file (the last process to write
	// stopped without closing the store): a read-write Open applies them.
	ErrNeedsRecovery = errors.New("store: journal holds writes to recover; open the store read-write once")
)
