// Package wasip1 implements the WASI preview1 functions a sandflow guest may
// import, for engines that do not bring their own (or whose own cannot be
// made deterministic): the clocks read a host-supplied clock, poll_oneoff
// advances it instead of sleeping, random_get reads a host-supplied
// generator, fd_write to 1 and 2 goes to host writers, and there are no
// files, arguments, environment or sockets.
//
// The functions work on a guest's linear memory through Memory and on the
// raw parameters of the call, so an engine only has to route each import
// to Funcs[i].Call. Out-of-range pointers are answered with EFAULT, never a
// trap; only proc_exit ends the guest, by returning an *ExitError.
//
// All integers in memory are little-endian, as WASI specifies.
package wasip1

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// ModuleName is the import module of the functions.
const ModuleName = "wasi_snapshot_preview1"

// Errno is a WASI error number. Functions return it as an i32.
type Errno uint16

// The errno values used here, and a few more, as the WASI preview1
// specification numbers them.
const (
	ESUCCESS Errno = 0
	E2BIG    Errno = 1
	EACCES   Errno = 2
	EAGAIN   Errno = 6
	EBADF    Errno = 8
	EFAULT   Errno = 21
	EINVAL   Errno = 28
	EIO      Errno = 29
	ENOSYS   Errno = 52
	ENOTDIR  Errno = 54
	ENOTSUP  Errno = 58
	ESPIPE   Errno = 70
)

func (e Errno) String() string {
	switch e {
	case ESUCCESS:
		return "ESUCCESS"
	case E2BIG:
		return "E2BIG"
	case EACCES:
		return "EACCES"
	case EAGAIN:
		return "EAGAIN"
	case EBADF:
		return "EBADF"
	case EFAULT:
		return "EFAULT"
	case EINVAL:
		return "EINVAL"
	case EIO:
		return "EIO"
	case ENOSYS:
		return "ENOSYS"
	case ENOTDIR:
		return "ENOTDIR"
	case ENOTSUP:
		return "ENOTSUP"
	case ESPIPE:
		return "ESPIPE"
	}
	return fmt.Sprintf("errno(%d)", uint16(e))
}

// Clock ids.
const (
	ClockRealtime  = 0
	ClockMonotonic = 1
)

// File types, for fd_fdstat_get and fd_filestat_get.
const (
	FiletypeUnknown         = 0
	FiletypeCharacterDevice = 2
)

// Rights, for fd_fdstat_get.
const (
	RightFdDatasync         uint64 = 1 << 0
	RightFdRead             uint64 = 1 << 1
	RightFdSeek             uint64 = 1 << 2
	RightFdFdstatSetFlags   uint64 = 1 << 3
	RightFdSync             uint64 = 1 << 4
	RightFdTell             uint64 = 1 << 5
	RightFdWrite            uint64 = 1 << 6
	RightFdAdvise           uint64 = 1 << 7
	RightFdAllocate         uint64 = 1 << 8
	RightFdFilestatGet      uint64 = 1 << 21
	RightFdFilestatSetSize  uint64 = 1 << 22
	RightFdFilestatSetTimes uint64 = 1 << 23
	RightPollFdReadwrite    uint64 = 1 << 27

	// StdioRights are the rights fd_fdstat_get reports for 0, 1 and 2: a
	// character device, which cannot seek or tell (as wasi-libc's isatty
	// expects, and as wazero reports).
	StdioRights = RightFdDatasync | RightFdRead | RightFdFdstatSetFlags | RightFdSync | RightFdWrite |
		RightFdAdvise | RightFdAllocate | RightFdFilestatGet | RightFdFilestatSetSize |
		RightFdFilestatSetTimes | RightPollFdReadwrite
)

// Event types of poll_oneoff subscriptions and events.
const (
	EventClock   = 0
	EventFdRead  = 1
	EventFdWrite = 2
)

// Sizes of the binary layouts.
const (
	SubscriptionSize = 48
	EventSize        = 32
	FdstatSize       = 24
	FilestatSize     = 64
	IovecSize        = 8
)

const subclockAbstime = 1

// Clock is the time a guest sees.
type Clock interface {
	// Now returns the current time in unix nanoseconds; both clocks read it.
	Now() int64
	// Sleep is poll_oneoff's clock wait; it must return at once.
	Sleep(ns int64)
}

// System is what a guest's WASI calls see of the world. Stdout and Stderr
// may be nil: output to them is dropped.
type System struct {
	Clock          Clock
	Random         io.Reader
	Stdout, Stderr io.Writer
}

// Memory is a guest's linear memory.
type Memory interface {
	// Bytes returns the whole memory (nil when the guest has none). It
	// aliases the guest's memory and is valid until the guest runs again.
	Bytes() []byte
}

// Bytes is a Memory over a byte slice, for tests and simple engines.
type Bytes []byte

// Bytes implements Memory.
func (b Bytes) Bytes() []byte { return b }

// ExitError is returned by proc_exit: the engine must end the guest and
// report the code.
type ExitError struct{ Code uint32 }

func (e *ExitError) Error() string { return fmt.Sprintf("proc_exit(%d)", e.Code) }

// ErrExit is matched by every *ExitError.
var ErrExit = errors.New("proc_exit")

// Is makes errors.Is(err, ErrExit) true.
func (e *ExitError) Is(target error) bool { return target == ErrExit }

// ValType is a WebAssembly value type, encoded as in the binary format.
type ValType byte

// The value types WASI functions use.
const (
	I32 ValType = 0x7f
	I64 ValType = 0x7e
)

// Func is one WASI function.
type Func struct {
	Name    string
	Params  []ValType
	Results []ValType // one i32 (the errno), or none (proc_exit)
	// Call runs the function on the raw parameters (an i32 is in the low 32
	// bits). It returns the errno, or an error that ends the guest.
	Call func(s *System, mem Memory, args []uint64) (Errno, error)
}

var le = binary.LittleEndian

// slice returns mem[ptr:ptr+n], or false when that is outside mem.
func slice(mem []byte, ptr uint32, n uint64) ([]byte, bool) {
	end := uint64(ptr) + n
	if end > uint64(len(mem)) {
		return nil, false
	}
	return mem[ptr:end], true
}

func putU32(mem []byte, ptr, v uint32) bool {
	b, ok := slice(mem, ptr, 4)
	if ok {
		le.PutUint32(b, v)
	}
	return ok
}

func putU64(mem []byte, ptr uint32, v uint64) bool {
	b, ok := slice(mem, ptr, 8)
	if ok {
		le.PutUint64(b, v)
	}
	return ok
}

func isStdio(fd uint32) bool { return fd <= 2 }

// ClockTimeGet: clock_time_get(id, precision, time_ptr). Both clocks read
// the System's clock.
func (s *System) ClockTimeGet(mem Memory, id uint32, _ uint64, timePtr uint32) Errno {
	if id != ClockRealtime && id != ClockMonotonic {
		return EINVAL
	}
	if !putU64(mem.Bytes(), timePtr, uint64(s.Clock.Now())) {
		return EFAULT
	}
	return ESUCCESS
}

// ClockResGet: clock_res_get(id, res_ptr). The resolution is 1ns.
func (s *System) ClockResGet(mem Memory, id, resPtr uint32) Errno {
	if id != ClockRealtime && id != ClockMonotonic {
		return EINVAL
	}
	if !putU64(mem.Bytes(), resPtr, 1) {
		return EFAULT
	}
	return ESUCCESS
}

// RandomGet: random_get(buf, len) fills the buffer from the System's
// generator.
func (s *System) RandomGet(mem Memory, buf, n uint32) Errno {
	b, ok := slice(mem.Bytes(), buf, uint64(n))
	if !ok {
		return EFAULT
	}
	if _, err := io.ReadFull(s.Random, b); err != nil {
		return EIO
	}
	return ESUCCESS
}

// iovecs returns the buffers of an iovec array, or false when the array or
// any buffer is outside mem.
func iovecs(mem []byte, iovs, count uint32) ([][]byte, bool) {
	arr, ok := slice(mem, iovs, uint64(count)*IovecSize)
	if !ok {
		return nil, false
	}
	out := make([][]byte, 0, count)
	for i := uint32(0); i < count; i++ {
		e := arr[i*IovecSize:]
		b, ok := slice(mem, le.Uint32(e), uint64(le.Uint32(e[4:])))
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// FdWrite: fd_write(fd, iovs, iovs_len, nwritten_ptr). Only 1 and 2 are
// open for writing. Every buffer is checked before anything is written, so
// an EFAULT writes nothing.
func (s *System) FdWrite(mem Memory, fd, iovs, count, nwrittenPtr uint32) Errno {
	var w io.Writer
	switch fd {
	case 1:
		w = s.Stdout
	case 2:
		w = s.Stderr
	default:
		return EBADF
	}
	m := mem.Bytes()
	bufs, ok := iovecs(m, iovs, count)
	if !ok {
		return EFAULT
	}
	if _, ok := slice(m, nwrittenPtr, 4); !ok {
		return EFAULT
	}
	var n uint32
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if w != nil {
			k, err := w.Write(b)
			n += uint32(k)
			if err != nil {
				return EIO
			}
		} else {
			n += uint32(len(b))
		}
	}
	putU32(m, nwrittenPtr, n)
	return ESUCCESS
}

// FdRead: fd_read(fd, iovs, iovs_len, nread_ptr). stdin is empty: reading
// it reads nothing.
func (s *System) FdRead(mem Memory, fd, iovs, count, nreadPtr uint32) Errno {
	if fd != 0 {
		return EBADF
	}
	m := mem.Bytes()
	if _, ok := iovecs(m, iovs, count); !ok {
		return EFAULT
	}
	if !putU32(m, nreadPtr, 0) {
		return EFAULT
	}
	return ESUCCESS
}

// FdFdstatGet: fd_fdstat_get(fd, buf). 0, 1 and 2 are character devices;
// there is no other descriptor.
//
//	offset 0 filetype u8 | 2 flags u16 | 8 rights_base u64 | 16 rights_inheriting u64
func (s *System) FdFdstatGet(mem Memory, fd, buf uint32) Errno {
	if !isStdio(fd) {
		return EBADF
	}
	b, ok := slice(mem.Bytes(), buf, FdstatSize)
	if !ok {
		return EFAULT
	}
	clear(b)
	b[0] = FiletypeCharacterDevice
	le.PutUint64(b[8:], StdioRights)
	return ESUCCESS
}

// FdFilestatGet: fd_filestat_get(fd, buf). A character device with one link
// and nothing else known.
//
//	offset 0 dev u64 | 8 ino u64 | 16 filetype u8 | 24 nlink u64 | 32 size u64 | 40 atim | 48 mtim | 56 ctim
func (s *System) FdFilestatGet(mem Memory, fd, buf uint32) Errno {
	if !isStdio(fd) {
		return EBADF
	}
	b, ok := slice(mem.Bytes(), buf, FilestatSize)
	if !ok {
		return EFAULT
	}
	clear(b)
	b[16] = FiletypeCharacterDevice
	le.PutUint64(b[24:], 1)
	return ESUCCESS
}

// Sizes writes the zero counts of args_sizes_get and environ_sizes_get:
// there are no arguments and no environment.
func (s *System) Sizes(mem Memory, countPtr, sizePtr uint32) Errno {
	m := mem.Bytes()
	if _, ok := slice(m, countPtr, 4); !ok {
		return EFAULT
	}
	if _, ok := slice(m, sizePtr, 4); !ok {
		return EFAULT
	}
	putU32(m, countPtr, 0)
	putU32(m, sizePtr, 0)
	return ESUCCESS
}

// PollOneoff: poll_oneoff(in, out, nsubscriptions, nevents_ptr).
//
// Subscriptions (48 bytes): userdata u64 at 0, tag u8 at 8, then for a
// clock: id u32 at 16, timeout u64 at 24, precision u64 at 32, flags u16 at
// 40; for fd_read and fd_write: fd u32 at 16. Events (32 bytes): userdata
// u64 at 0, error u16 at 8, type u8 at 10, nbytes u64 at 16, flags u16 at
// 24.
//
// No descriptor can be polled, so a descriptor subscription is an event at
// once with an error (ENOTSUP for 0-2, EBADF for others), and then nothing
// sleeps. Otherwise the clock advances by the shortest clock timeout (an
// absolute one counts from the clock's now) through Clock.Sleep, which
// returns at once, and the clock subscriptions due then are the events.
func (s *System) PollOneoff(mem Memory, in, out, nsubs, neventsPtr uint32) Errno {
	if nsubs == 0 {
		return EINVAL
	}
	m := mem.Bytes()
	inBuf, ok1 := slice(m, in, uint64(nsubs)*SubscriptionSize)
	outBuf, ok2 := slice(m, out, uint64(nsubs)*EventSize)
	_, ok3 := slice(m, neventsPtr, 4)
	if !ok1 || !ok2 || !ok3 {
		return EFAULT
	}

	type sub struct {
		userdata uint64
		tag      byte
		timeout  int64 // relative, for clocks
		errno    Errno // for descriptors and bad clocks: an event at once
	}
	subs := make([]sub, nsubs)
	var now int64
	haveNow := false
	immediate := 0
	for i := range subs {
		b := inBuf[i*SubscriptionSize:]
		sb := sub{userdata: le.Uint64(b), tag: b[8]}
		switch sb.tag {
		case EventClock:
			id, timeout, flags := le.Uint32(b[16:]), le.Uint64(b[24:]), le.Uint16(b[40:])
			switch {
			case flags&^subclockAbstime != 0:
				return EINVAL
			case id != ClockRealtime && id != ClockMonotonic:
				sb.errno = EINVAL
				immediate++
			case flags&subclockAbstime != 0:
				if !haveNow {
					now, haveNow = s.Clock.Now(), true
				}
				sb.timeout = max(int64(min(timeout, math.MaxInt64))-now, 0)
			default:
				sb.timeout = int64(min(timeout, math.MaxInt64))
			}
		case EventFdRead, EventFdWrite:
			if isStdio(le.Uint32(b[16:])) {
				sb.errno = ENOTSUP
			} else {
				sb.errno = EBADF
			}
			immediate++
		default:
			return EINVAL
		}
		subs[i] = sb
	}
	// Events go out in subscription order.
	n := 0
	emit := func(sb sub) {
		e := outBuf[n*EventSize : (n+1)*EventSize]
		clear(e)
		le.PutUint64(e, sb.userdata)
		le.PutUint16(e[8:], uint16(sb.errno))
		e[10] = sb.tag
		n++
	}
	if immediate > 0 {
		for _, sb := range subs {
			if sb.tag != EventClock || sb.errno != ESUCCESS {
				emit(sb)
			}
		}
	} else {
		shortest := int64(math.MaxInt64)
		for _, sb := range subs {
			shortest = min(shortest, sb.timeout)
		}
		if shortest > 0 {
			s.Clock.Sleep(shortest)
		}
		for _, sb := range subs {
			if sb.timeout == shortest {
				emit(sb)
			}
		}
	}
	putU32(m, neventsPtr, uint32(n))
	return ESUCCESS
}

func u32(args []uint64, i int) uint32 { return uint32(args[i]) }

// notStdio is the answer of a descriptor operation this host does not
// provide: ENOTSUP on 0-2, which exist, and EBADF on any other.
func notStdio(fd uint32) Errno {
	if isStdio(fd) {
		return ENOTSUP
	}
	return EBADF
}

// unsupportedFd makes a function that refuses, by its descriptor argument.
func unsupportedFd(fdArg int) func(*System, Memory, []uint64) (Errno, error) {
	return func(_ *System, _ Memory, args []uint64) (Errno, error) { return notStdio(u32(args, fdArg)), nil }
}

func ok(e Errno) (Errno, error) { return e, nil }

func sig(params ...ValType) []ValType { return params }

var errnoResult = []ValType{I32}

// Funcs are the WASI preview1 functions, in the specification's order.
var Funcs = []Func{
	{"args_get", sig(I32, I32), errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(ESUCCESS) }},
	{"args_sizes_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.Sizes(m, u32(a, 0), u32(a, 1)))
	}},
	{"environ_get", sig(I32, I32), errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(ESUCCESS) }},
	{"environ_sizes_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.Sizes(m, u32(a, 0), u32(a, 1)))
	}},
	{"clock_res_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.ClockResGet(m, u32(a, 0), u32(a, 1)))
	}},
	{"clock_time_get", sig(I32, I64, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.ClockTimeGet(m, u32(a, 0), a[1], u32(a, 2)))
	}},
	{"fd_advise", sig(I32, I64, I64, I32), errnoResult, unsupportedFd(0)},
	{"fd_allocate", sig(I32, I64, I64), errnoResult, unsupportedFd(0)},
	{"fd_close", sig(I32), errnoResult, unsupportedFd(0)},
	{"fd_datasync", sig(I32), errnoResult, unsupportedFd(0)},
	{"fd_fdstat_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.FdFdstatGet(m, u32(a, 0), u32(a, 1)))
	}},
	{"fd_fdstat_set_flags", sig(I32, I32), errnoResult, unsupportedFd(0)},
	{"fd_fdstat_set_rights", sig(I32, I64, I64), errnoResult, unsupportedFd(0)},
	{"fd_filestat_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.FdFilestatGet(m, u32(a, 0), u32(a, 1)))
	}},
	{"fd_filestat_set_size", sig(I32, I64), errnoResult, unsupportedFd(0)},
	{"fd_filestat_set_times", sig(I32, I64, I64, I32), errnoResult, unsupportedFd(0)},
	{"fd_pread", sig(I32, I32, I32, I64, I32), errnoResult, unsupportedFd(0)},
	// No preopened directories: every descriptor answers EBADF.
	{"fd_prestat_get", sig(I32, I32), errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(EBADF) }},
	{"fd_prestat_dir_name", sig(I32, I32, I32), errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(EBADF) }},
	{"fd_pwrite", sig(I32, I32, I32, I64, I32), errnoResult, unsupportedFd(0)},
	{"fd_read", sig(I32, I32, I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.FdRead(m, u32(a, 0), u32(a, 1), u32(a, 2), u32(a, 3)))
	}},
	{"fd_readdir", sig(I32, I32, I32, I64, I32), errnoResult, unsupportedFd(0)},
	{"fd_renumber", sig(I32, I32), errnoResult, unsupportedFd(0)},
	{"fd_seek", sig(I32, I64, I32, I32), errnoResult, unsupportedFd(0)},
	{"fd_sync", sig(I32), errnoResult, unsupportedFd(0)},
	{"fd_tell", sig(I32, I32), errnoResult, unsupportedFd(0)},
	{"fd_write", sig(I32, I32, I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.FdWrite(m, u32(a, 0), u32(a, 1), u32(a, 2), u32(a, 3)))
	}},
	{"path_create_directory", sig(I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_filestat_get", sig(I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_filestat_set_times", sig(I32, I32, I32, I32, I64, I64, I32), errnoResult, unsupportedFd(0)},
	{"path_link", sig(I32, I32, I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_open", sig(I32, I32, I32, I32, I32, I64, I64, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_readlink", sig(I32, I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_remove_directory", sig(I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_rename", sig(I32, I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"path_symlink", sig(I32, I32, I32, I32, I32), errnoResult, unsupportedFd(2)},
	{"path_unlink_file", sig(I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"poll_oneoff", sig(I32, I32, I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.PollOneoff(m, u32(a, 0), u32(a, 1), u32(a, 2), u32(a, 3)))
	}},
	{"proc_exit", sig(I32), nil, func(_ *System, _ Memory, a []uint64) (Errno, error) {
		return 0, &ExitError{Code: u32(a, 0)}
	}},
	{"proc_raise", sig(I32), errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(ENOTSUP) }},
	{"sched_yield", nil, errnoResult, func(_ *System, _ Memory, _ []uint64) (Errno, error) { return ok(ESUCCESS) }},
	{"random_get", sig(I32, I32), errnoResult, func(s *System, m Memory, a []uint64) (Errno, error) {
		return ok(s.RandomGet(m, u32(a, 0), u32(a, 1)))
	}},
	{"sock_accept", sig(I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"sock_recv", sig(I32, I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"sock_send", sig(I32, I32, I32, I32, I32), errnoResult, unsupportedFd(0)},
	{"sock_shutdown", sig(I32, I32), errnoResult, unsupportedFd(0)},
}

// Lookup returns the function named name.
func Lookup(name string) (Func, bool) {
	for _, f := range Funcs {
		if f.Name == name {
			return f, true
		}
	}
	return Func{}, false
}
