package store

import (
	"fmt"

	"github.com/sandflow/sandflow/store/internal/integrity"
)

// CorruptError is returned when stored bytes are damaged: a value whose
// checksum does not match, a value that does not decode, a page of the
// file that is not what the file's structure says it is, or a journal
// record that is damaged with intact records after it. It matches
// ErrCorrupt with errors.Is. The store never repairs what it reports.
// Its fields: Bucket names where the damage is (a bucket, "file" for the
// structure of the database file, or "journal"), Key the damaged value's
// key when there is one, Offset the damage's byte offset in the file or
// the journal (-1 for a value's), and What what is wrong.
type CorruptError = integrity.CorruptError

// NotStoreError is returned by Open for a file that exists and is not a
// store: empty (0 bytes), or of another format. Only a missing file is
// created; an existing one is never initialised over. It matches
// ErrNotStore with errors.Is.
type NotStoreError = integrity.NotStoreError

// OldFormatError is returned by Open for a store written by an earlier
// build, in a format this build does not read: format 3 and older keep
// no checksums. Upgrade adds them.
type OldFormatError struct {
	Path    string
	Version uint32
}

func (e *OldFormatError) Error() string {
	return fmt.Sprintf("store: %s is in format %d, from before stored values carried checksums; this build reads format %d: back the file up and run `sandflow doctor --upgrade` to add them", e.Path, e.Version, schemaVersion)
}

// Is makes an *OldFormatError match ErrOldFormat.
func (e *OldFormatError) Is(target error) bool { return target == ErrOldFormat }
