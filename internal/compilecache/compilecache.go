// Package compilecache keeps the sidecar checksums of the engines'
// compile caches.
//
// The compile caches (cache/<engine>/ in the data directory) keep
// compiled machine code, which an engine loads and runs without checking
// it whole: wazero checks the code's checksum but not the tables beside
// it, and refuses a module whose entry does not load until the entry is
// deleted by hand; wasmtime trusts its artifacts entirely. So every entry
// gets a sidecar, <entry>.sum, holding the entry's CRC-32C (Castagnoli)
// and size, written once the entry is complete. An entry whose sidecar is
// missing or does not match is damaged (or was cut off by a crash): it is
// discarded, with a log line, and the module compiled again.
package compilecache

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// SumSuffix ends the name of an entry's sidecar.
const SumSuffix = ".sum"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// cacheSum is the sidecar's content for an entry's bytes.
func Sum(b []byte) []byte {
	return fmt.Appendf(nil, "crc32c %08x size %d\n", crc32.Checksum(b, crcTable), len(b))
}

// Finding is a damaged compile-cache entry.
type Finding struct {
	Path string `json:"path"`
	What string `json:"what"`
}

// checkCacheEntry reads an entry and checks it against its sidecar,
// returning its bytes when it checks out.
func CheckEntry(path string) ([]byte, error) {
	want, err := os.ReadFile(path + SumSuffix)
	if err != nil {
		return nil, fmt.Errorf("no checksum beside it (%v)", errors.Unwrap(err))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if got := Sum(b); !bytes.Equal(got, want) {
		return nil, fmt.Errorf("checksum mismatch: %q, the entry gives %q", strings.TrimSpace(string(want)), strings.TrimSpace(string(got)))
	}
	return b, nil
}

// isCacheEntry says whether a file in a cache directory is an entry: not
// a sidecar, and not an engine's temporary file (written, then renamed).
func isEntry(name string) bool {
	return !strings.HasSuffix(name, SumSuffix) && !strings.HasSuffix(name, ".tmp") && !strings.HasPrefix(name, ".tmp")
}

// scanCache checks every entry under dir against its sidecar. With
// discard, a damaged entry is removed (with its sidecar) and logged, and
// a sidecar without its entry removed; without, nothing is changed.
func Scan(dir string, discard bool) (checked int, bad []Finding, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, SumSuffix) {
			if _, err := os.Stat(strings.TrimSuffix(path, SumSuffix)); errors.Is(err, fs.ErrNotExist) && discard {
				os.Remove(path)
			}
			return nil
		}
		if !isEntry(name) {
			return nil
		}
		checked++
		if _, cerr := CheckEntry(path); cerr != nil {
			bad = append(bad, Finding{Path: path, What: cerr.Error()})
			if discard {
				Discard(path, cerr)
			}
		}
		return nil
	})
	return checked, bad, err
}

// discardCacheEntry removes a damaged entry and its sidecar, and says so.
func Discard(path string, why error) {
	os.Remove(path)
	os.Remove(path + SumSuffix)
	slog.Warn("compile cache: discarded a damaged entry; the module is compiled again", "entry", path, "reason", why.Error())
}

// sealCache writes the sidecar of every entry under dir that has none:
// entries the engine wrote since the last scan, which this process
// compiled and knows whole. An entry is sealed from the bytes on disk.
func Seal(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !isEntry(d.Name()) {
			return nil
		}
		if _, err := os.Stat(path + SumSuffix); err == nil {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return WriteFileAtomic(path+SumSuffix, Sum(b))
	})
}

// WriteFileAtomic writes b to path through a temporary file and a rename:
// a reader sees all of it or none.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
