// Package wasmbin reads and writes the primitives of the WebAssembly binary
// format: LEB128 numbers, names, vectors, limits and value types. The
// module parser (internal/wasmparse) and the metering rewriter
// (internal/meter) share it; both read untrusted bytes, so every read is
// bounds-checked and every failure is an error wrapping the caller's
// sentinel.
package wasmbin

import (
	"fmt"
	"unicode/utf8"
)

// Reader reads a byte slice from Off.
type Reader struct {
	B   []byte
	Off int
	// Err is the sentinel every failure wraps.
	Err error
}

// Fail returns an error at the reader's position.
func (r *Reader) Fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", r.Err, r.Off, fmt.Sprintf(format, args...))
}

// Byte reads one byte.
func (r *Reader) Byte() (byte, error) {
	if r.Off >= len(r.B) {
		return 0, r.Fail("unexpected end")
	}
	c := r.B[r.Off]
	r.Off++
	return c, nil
}

// LEB reads an unsigned LEB128 number of up to 64 bits (10 bytes); it is
// also how signed immediates are skipped.
func (r *Reader) LEB() (uint64, error) {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.Fail("LEB128 too long")
}

// U32 reads an unsigned 32-bit LEB128 number: at most 5 bytes, no
// overflow.
func (r *Reader) U32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, r.Fail("u32 overflows")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.Fail("u32 over 5 bytes")
}

// Skip skips n bytes.
func (r *Reader) Skip(n int) error {
	if n < 0 || n > len(r.B)-r.Off {
		return r.Fail("%d bytes run past the end", n)
	}
	r.Off += n
	return nil
}

// Bytes returns the next n bytes, aliasing the input.
func (r *Reader) Bytes(n int) ([]byte, error) {
	start := r.Off
	if err := r.Skip(n); err != nil {
		return nil, err
	}
	return r.B[start:r.Off], nil
}

// Name reads a length-prefixed UTF-8 name.
func (r *Reader) Name() (string, error) {
	n, err := r.U32()
	if err != nil {
		return "", err
	}
	b, err := r.Bytes(int(n))
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", r.Fail("name is not UTF-8")
	}
	return string(b), nil
}

// Count reads a vector's length and checks it against the bytes left, each
// entry taking at least minEntry bytes, so a hostile count cannot make a
// reader allocate or loop without bound.
func (r *Reader) Count(minEntry int) (uint32, error) {
	n, err := r.U32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minEntry) > uint64(len(r.B)-r.Off) {
		return 0, r.Fail("count %d is more than the section holds", n)
	}
	return n, nil
}

// Limits reads limits and returns the minimum and the flag byte.
func (r *Reader) Limits() (min uint32, flag byte, err error) {
	if flag, err = r.Byte(); err != nil {
		return 0, 0, err
	}
	if min, err = r.U32(); err != nil {
		return 0, 0, err
	}
	if flag&1 != 0 {
		if _, err := r.U32(); err != nil {
			return 0, 0, err
		}
	}
	return min, flag, nil
}

// ValType skips a value type, including the typed-reference forms.
func (r *Reader) ValType() error {
	b, err := r.Byte()
	if err != nil {
		return err
	}
	if b == 0x63 || b == 0x64 { // (ref null ht), (ref ht)
		_, err = r.LEB()
	}
	return err
}

// End checks the reader is at the end: bytes after a section's last entry
// make a module invalid.
func (r *Reader) End() error {
	if r.Off != len(r.B) {
		return r.Fail("%d bytes after the last entry: the module is invalid", len(r.B)-r.Off)
	}
	return nil
}

// AppendULEB appends v as unsigned LEB128.
func AppendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

// AppendSLEB appends v as signed LEB128.
func AppendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// AppendName appends a length-prefixed name.
func AppendName(b []byte, s string) []byte {
	return append(AppendULEB(b, uint64(len(s))), s...)
}
