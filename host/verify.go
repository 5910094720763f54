package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandflow/sandflow/store"
)

// DirReport is what VerifyDir found in a data directory.
type DirReport struct {
	// Store is the store file's report (store.Verify).
	Store *store.Report `json:"store"`
	// CacheEntries counts the compile-cache entries checked;
	// CacheFindings lists the damaged ones.
	CacheEntries  int            `json:"cacheEntries"`
	CacheFindings []CacheFinding `json:"cacheFindings"`
}

// OK reports whether nothing was found damaged.
func (r *DirReport) OK() bool { return r.Store.OK() && len(r.CacheFindings) == 0 }

// VerifyDir checks a data directory without changing anything in it: the
// store file (every page, checksum, log and index: store.Verify) and the
// compile caches' entries against their checksums. Damage is reported
// in the DirReport; the error is for what kept VerifyDir from looking
// (no store in dir, another process writing it: store.ErrLocked).
func VerifyDir(ctx context.Context, dir string) (*DirReport, error) {
	rep, err := store.Verify(filepath.Join(dir, storeFile))
	if err != nil {
		return nil, err
	}
	out := &DirReport{Store: rep, CacheFindings: []CacheFinding{}}
	n, bad, err := VerifyCache(filepath.Join(dir, "cache"))
	if err != nil {
		return nil, fmt.Errorf("host: verify compile cache: %w", err)
	}
	out.CacheEntries, out.CacheFindings = n, append(out.CacheFindings, bad...)
	return out, nil
}

// storeFile is the store's file in a data directory.
const storeFile = "sandflow.db"

// OpenDirReadOnly opens the store in dir read-only, and a Host on it, for
// commands that only read (listing, showing, exporting, replaying): the
// store file is never written, and other readers may have it open at the
// same time. Writes fail with store.ErrReadOnly. Compiled modules are
// still cached under dir. A missing store is os.ErrNotExist, and a store
// whose journal holds writes to recover store.ErrNeedsRecovery: OpenDir
// applies them.
func OpenDirReadOnly(ctx context.Context, dir string, opts *Options) (*Host, error) {
	st, err := store.Open(filepath.Join(dir, storeFile), &store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return openOwned(ctx, dir, st, opts)
}

// NeedsWritableOpen reports whether OpenDirReadOnly failed only for want
// of a write: no store yet, or a journal to recover.
func NeedsWritableOpen(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, store.ErrNeedsRecovery)
}
