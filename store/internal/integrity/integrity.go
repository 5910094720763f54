// Package integrity is how the store knows what it reads is what it
// wrote: the checksum every stored value ends with, the errors that
// report damage (CorruptError) or a file that is not a store
// (NotStoreError), and Guard, which turns bbolt's panics on a damaged
// file into a CorruptError. The store re-exports the errors.
package integrity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The errors *CorruptError and *NotStoreError match; the store exports
// them as store.ErrCorrupt and store.ErrNotStore, where they are
// documented.
var (
	ErrCorrupt  = errors.New("store: corrupt")
	ErrNotStore = errors.New("store: not a store file")
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Every value the store keeps, in every bucket, ends with a CRC-32C
// (Castagnoli) of the bucket's name, the key's length (u32, big-endian),
// the key and the value before the checksum (u32, big-endian). Reading a
// value checks it: a changed byte, a value cut short, or a value moved to
// another key or bucket is reported as a *CorruptError rather than
// decoded.
const SumSize = 4

// sum is the checksum of value v stored under key in bucket.
func sum(bucket, key, v []byte) uint32 {
	var kl [4]byte
	binary.BigEndian.PutUint32(kl[:], uint32(len(key)))
	c := crc32.Update(0, crcTable, bucket)
	c = crc32.Update(c, crcTable, kl[:])
	c = crc32.Update(c, crcTable, key)
	return crc32.Update(c, crcTable, v)
}

// Seal appends v and its checksum to dst.
func Seal(dst, bucket, key, v []byte) []byte {
	dst = append(dst, v...)
	return binary.BigEndian.AppendUint32(dst, sum(bucket, key, v))
}

// Open checks a stored value's checksum and returns the value
// without it; the result aliases sv. A nil sv (no such key) gives nil and
// no error.
func Open(bucket, key, sv []byte) ([]byte, error) {
	if sv == nil {
		return nil, nil
	}
	if len(sv) < SumSize {
		return nil, Corruptf(bucket, key, "value is %d bytes, shorter than its checksum", len(sv))
	}
	v := sv[:len(sv)-SumSize]
	if got, want := binary.BigEndian.Uint32(sv[len(v):]), sum(bucket, key, v); got != want {
		return nil, Corruptf(bucket, key, "checksum mismatch (stored %08x, computed %08x)", got, want)
	}
	return v, nil
}

// CorruptError is returned when stored bytes are damaged: a value whose
// checksum does not match, a value that does not decode, a page of the
// file that is not what the file's structure says it is, or a journal
// record that is damaged with intact records after it. It matches
// ErrCorrupt with errors.Is. The store never repairs what it reports.
type CorruptError struct {
	// Bucket names where the damage is: a bucket ("runs", "events", ...),
	// "file" for the structure of the database file, or "journal".
	Bucket string
	// Key is the damaged value's key, when there is one.
	Key []byte
	// Offset is the damage's byte offset in the file or the journal, or
	// -1 when it is a value's.
	Offset int64
	// What says what is wrong.
	What string
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	b.WriteString("store: corrupt ")
	b.WriteString(e.Bucket)
	if e.Key != nil {
		b.WriteString(" key ")
		b.WriteString(PrintKey(e.Key))
	}
	if e.Offset >= 0 {
		b.WriteString(" at offset ")
		b.WriteString(strconv.FormatInt(e.Offset, 10))
	}
	b.WriteString(": ")
	b.WriteString(e.What)
	return b.String()
}

// Is makes a *CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// PrintKey shows a key as a quoted string when it is printable, else in
// hex; keys often end in a big-endian number (an event's seq).
func PrintKey(k []byte) string {
	if i := len(k) - 9; i > 0 && k[i] == 0 && isPrintable(k[:i]) {
		return strconv.Quote(string(k[:i])) + "#" + strconv.FormatUint(binary.BigEndian.Uint64(k[i+1:]), 10)
	}
	if i := len(k) - 5; i > 0 && k[i] == 0 && isPrintable(k[:i]) {
		return strconv.Quote(string(k[:i])) + "@" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(k[i+1:])), 10)
	}
	if isPrintable(k) {
		return strconv.Quote(string(k))
	}
	return fmt.Sprintf("%x", k)
}

func isPrintable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Corruptf makes a value's CorruptError.
func Corruptf(bucket, key []byte, format string, args ...any) *CorruptError {
	return &CorruptError{Bucket: string(bucket), Key: append([]byte(nil), key...), Offset: -1, What: fmt.Sprintf(format, args...)}
}

// NotStoreError is returned by Open for a file that exists and is not a
// store: empty (0 bytes), or of another format. Only a missing file is
// created; an existing one is never initialised over.
type NotStoreError struct {
	Path   string
	Reason string
}

func (e *NotStoreError) Error() string {
	return "store: " + e.Path + " is not a sandflow store: " + e.Reason
}

// Is makes a *NotStoreError match ErrNotStore.
func (e *NotStoreError) Is(target error) bool { return target == ErrNotStore }

// Guard runs fn, turning a panic that comes from bbolt, or a memory fault
// (the file's map, read where the file is damaged or was cut short), into
// a *CorruptError, which onPanic (when not nil) is given too. Any other
// panic is raised again: it is a bug, not damage.
func Guard(what string, onPanic func(error), fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		r := recover()
		if r == nil {
			return
		}
		if !fromBolt(r) {
			panic(r)
		}
		err = &CorruptError{Bucket: "file", Offset: -1, What: fmt.Sprintf("%s: bbolt failed on the file: %v", what, r)}
		if onPanic != nil {
			onPanic(err)
		}
	}()
	return fn()
}

// fromBolt reports whether the panic being recovered (r) was raised in
// bbolt's code, or is a memory fault away from the first page of memory
// (where a nil pointer points): a read of the file's map where the file
// is damaged or was cut short under it. It is called from the deferred
// function, so the panicking frames are still on the stack.
func fromBolt(r any) bool {
	if re, ok := r.(runtime.Error); ok {
		if fa, fault := re.(interface{ Addr() uintptr }); fault && fa.Addr() >= 64<<10 {
			return true
		}
	}
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	seenPanic := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			seenPanic = true
		case seenPanic && strings.HasPrefix(f.Function, "runtime."):
			// the runtime's own frames of an index or nil fault
		case seenPanic:
			return strings.HasPrefix(f.Function, "go.etcd.io/bbolt")
		}
		if !more {
			return false
		}
	}
}
