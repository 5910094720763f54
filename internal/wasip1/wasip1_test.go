package wasip1

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// fakeClock is a clock that only moves when slept.
type fakeClock struct {
	now    int64
	sleeps []int64
}

func (c *fakeClock) Now() int64 { return c.now }
func (c *fakeClock) Sleep(ns int64) {
	c.sleeps = append(c.sleeps, ns)
	c.now += ns
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken") }

// mem returns a memory of n bytes of '?', the sentinel that shows which
// bytes a call touched.
func mem(n int) Bytes { return Bytes(bytes.Repeat([]byte{'?'}, n)) }

func sys() (*System, *fakeClock, *bytes.Buffer, *bytes.Buffer) {
	c := &fakeClock{now: 1_700_000_000_123_456_789}
	var out, errOut bytes.Buffer
	return &System{Clock: c, Random: bytes.NewReader([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), Stdout: &out, Stderr: &errOut}, c, &out, &errOut
}

// call runs a function from the table, as an engine would.
func call(t *testing.T, s *System, m Memory, name string, args ...uint64) Errno {
	t.Helper()
	f, ok := Lookup(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	if len(args) != len(f.Params) {
		t.Fatalf("%s takes %d parameters, got %d", name, len(f.Params), len(args))
	}
	e, err := f.Call(s, m, args)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return e
}

func expectMem(t *testing.T, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("memory:\n got %q\nwant %q", got, want)
	}
}

func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestClockTimeGet(t *testing.T) {
	s, c, _, _ := sys()
	for _, id := range []uint64{ClockRealtime, ClockMonotonic} {
		m := mem(10)
		if e := call(t, s, m, "clock_time_get", id, 1, 1); e != ESUCCESS {
			t.Fatalf("clock %d: %v", id, e)
		}
		want := append(append([]byte{'?'}, u64le(uint64(c.now))...), '?')
		expectMem(t, m, want)
	}
	m := mem(10)
	if e := call(t, s, m, "clock_time_get", 2, 1, 1); e != EINVAL {
		t.Errorf("process cputime clock: %v, want EINVAL", e)
	}
	if e := call(t, s, m, "clock_time_get", ClockMonotonic, 1, 3); e != EFAULT {
		t.Errorf("result past the end: %v, want EFAULT", e)
	}
	expectMem(t, m, mem(10))
}

func TestClockResGet(t *testing.T) {
	s, _, _, _ := sys()
	m := mem(10)
	if e := call(t, s, m, "clock_res_get", ClockRealtime, 1); e != ESUCCESS {
		t.Fatal(e)
	}
	expectMem(t, m, append(append([]byte{'?'}, u64le(1)...), '?'))
	if e := call(t, s, mem(10), "clock_res_get", 3, 1); e != EINVAL {
		t.Errorf("thread cputime clock: %v", e)
	}
	if e := call(t, s, mem(10), "clock_res_get", ClockRealtime, 0xfffffffc); e != EFAULT {
		t.Errorf("result at the top of the address space: %v", e)
	}
}

func TestRandomGet(t *testing.T) {
	s, _, _, _ := sys()
	m := mem(7)
	if e := call(t, s, m, "random_get", 1, 5); e != ESUCCESS {
		t.Fatal(e)
	}
	expectMem(t, m, []byte{'?', 1, 2, 3, 4, 5, '?'})
	if e := call(t, s, m, "random_get", 3, 5); e != EFAULT {
		t.Errorf("past the end: %v", e)
	}
	// The generator runs dry: EIO.
	s.Random = bytes.NewReader(nil)
	if e := call(t, s, m, "random_get", 1, 2); e != EIO {
		t.Errorf("failing generator: %v", e)
	}
}

// iov lays out an iovec array at off in m: pairs of (ptr, len).
func iov(m []byte, off uint32, pairs ...uint32) {
	for i, v := range pairs {
		binary.LittleEndian.PutUint32(m[off+uint32(i)*4:], v)
	}
}

func TestFdWrite(t *testing.T) {
	s, _, out, errOut := sys()
	m := mem(40)
	copy(m[1:], "hello")
	copy(m[7:], "world")
	iov(m, 16, 1, 5, 7, 5, 7, 0) // three iovecs, the last empty
	want := slices.Clone(m)
	if e := call(t, s, m, "fd_write", 1, 16, 3, 35); e != ESUCCESS {
		t.Fatal(e)
	}
	copy(want[35:], []byte{10, 0, 0, 0})
	expectMem(t, m, want)
	if out.String() != "helloworld" || errOut.Len() != 0 {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	if e := call(t, s, m, "fd_write", 2, 16, 1, 35); e != ESUCCESS || errOut.String() != "hello" {
		t.Errorf("stderr: %v %q", e, errOut)
	}
	copy(want[35:], []byte{5, 0, 0, 0})
	expectMem(t, m, want)

	for _, tc := range []struct {
		name                  string
		fd, iovs, n, nwritten uint32
		errno                 Errno
	}{
		{"stdin", 0, 16, 1, 35, EBADF},
		{"fd 3", 3, 16, 1, 35, EBADF},
		{"iovecs past the end", 1, 36, 1, 35, EFAULT},
		{"iovec count overflows", 1, 16, 0x20000000, 35, EFAULT},
		{"nwritten past the end", 1, 16, 1, 37, EFAULT},
	} {
		out.Reset()
		before := slices.Clone(m)
		if e := call(t, s, m, "fd_write", uint64(tc.fd), uint64(tc.iovs), uint64(tc.n), uint64(tc.nwritten)); e != tc.errno {
			t.Errorf("%s: %v, want %v", tc.name, e, tc.errno)
		}
		expectMem(t, m, before)
		if out.Len() != 0 {
			t.Errorf("%s wrote %q", tc.name, out)
		}
	}
	// A buffer outside memory: nothing at all is written, not even the
	// buffers before it.
	iov(m, 24, 1, 5, 30, 20)
	out.Reset()
	if e := call(t, s, m, "fd_write", 1, 24, 2, 35); e != EFAULT || out.Len() != 0 {
		t.Errorf("second buffer outside memory: %v, wrote %q", e, out)
	}
	// A failing writer: EIO.
	s.Stdout = failWriter{}
	if e := call(t, s, m, "fd_write", 1, 16, 1, 35); e != EIO {
		t.Errorf("failing writer: %v", e)
	}
	// No writer: the output is dropped, and counted as written.
	s.Stdout = nil
	if e := call(t, s, m, "fd_write", 1, 16, 1, 35); e != ESUCCESS || m[35] != 5 {
		t.Errorf("nil writer: %v %v", e, m[35])
	}
}

func TestFdRead(t *testing.T) {
	s, _, _, _ := sys()
	m := mem(24)
	iov(m, 8, 1, 4)
	want := slices.Clone(m)
	if e := call(t, s, m, "fd_read", 0, 8, 1, 17); e != ESUCCESS {
		t.Fatal(e)
	}
	copy(want[17:], []byte{0, 0, 0, 0})
	expectMem(t, m, want)
	if e := call(t, s, m, "fd_read", 1, 8, 1, 17); e != EBADF {
		t.Errorf("stdout: %v", e)
	}
	if e := call(t, s, m, "fd_read", 0, 8, 1, 21); e != EFAULT {
		t.Errorf("nread past the end: %v", e)
	}
}

func TestFdFdstatGet(t *testing.T) {
	s, _, _, _ := sys()
	for fd := range uint64(3) {
		m := mem(FdstatSize + 2)
		if e := call(t, s, m, "fd_fdstat_get", fd, 1); e != ESUCCESS {
			t.Fatal(fd, e)
		}
		want := []byte{'?', FiletypeCharacterDevice, 0, 0, 0, 0, 0, 0, 0}
		want = append(want, u64le(StdioRights)...)
		want = append(want, u64le(0)...)
		want = append(want, '?')
		expectMem(t, m, want)
	}
	if StdioRights&(RightFdSeek|RightFdTell) != 0 || StdioRights&RightFdWrite == 0 {
		t.Errorf("stdio rights %#x", StdioRights)
	}
	m := mem(FdstatSize + 2)
	if e := call(t, s, m, "fd_fdstat_get", 3, 1); e != EBADF {
		t.Errorf("fd 3: %v", e)
	}
	if e := call(t, s, m, "fd_fdstat_get", 1, 3); e != EFAULT {
		t.Errorf("buffer past the end: %v", e)
	}
	expectMem(t, m, mem(FdstatSize+2))
}

func TestFdFilestatGet(t *testing.T) {
	s, _, _, _ := sys()
	m := mem(FilestatSize + 2)
	if e := call(t, s, m, "fd_filestat_get", 2, 1); e != ESUCCESS {
		t.Fatal(e)
	}
	want := make([]byte, FilestatSize+2)
	want[0], want[len(want)-1] = '?', '?'
	want[1+16] = FiletypeCharacterDevice
	want[1+24] = 1
	expectMem(t, m, want)
	if e := call(t, s, mem(10), "fd_filestat_get", 7, 0); e != EBADF {
		t.Errorf("fd 7: %v", e)
	}
}

func TestArgsAndEnvironAreEmpty(t *testing.T) {
	s, _, _, _ := sys()
	for _, name := range []string{"args_sizes_get", "environ_sizes_get"} {
		m := mem(10)
		if e := call(t, s, m, name, 1, 5); e != ESUCCESS {
			t.Fatal(name, e)
		}
		expectMem(t, m, []byte{'?', 0, 0, 0, 0, 0, 0, 0, 0, '?'})
		m = mem(10)
		if e := call(t, s, m, name, 1, 7); e != EFAULT {
			t.Errorf("%s size past the end: %v", name, e)
		}
		expectMem(t, m, mem(10)) // nothing written, not even the count
	}
	for _, name := range []string{"args_get", "environ_get"} {
		m := mem(10)
		if e := call(t, s, m, name, 1, 5); e != ESUCCESS {
			t.Fatal(name, e)
		}
		expectMem(t, m, mem(10))
	}
}

// subscription lays out a poll_oneoff subscription.
func subscription(userdata uint64, tag byte, idOrFd uint32, timeout uint64, flags uint16) []byte {
	b := make([]byte, SubscriptionSize)
	binary.LittleEndian.PutUint64(b, userdata)
	b[8] = tag
	binary.LittleEndian.PutUint32(b[16:], idOrFd)
	binary.LittleEndian.PutUint64(b[24:], timeout)
	binary.LittleEndian.PutUint16(b[40:], flags)
	return b
}

func event(userdata uint64, errno Errno, tag byte) []byte {
	b := make([]byte, EventSize)
	binary.LittleEndian.PutUint64(b, userdata)
	binary.LittleEndian.PutUint16(b[8:], uint16(errno))
	b[10] = tag
	return b
}

func TestPollOneoffClock(t *testing.T) {
	s, c, _, _ := sys()
	start := c.now
	// Two clock subscriptions: the shorter one fires, after the clock
	// advanced by its timeout; the longer one does not.
	in := append(subscription(7, EventClock, ClockMonotonic, 5_000_000, 0), subscription(8, EventClock, ClockRealtime, 9_000_000, 0)...)
	m := mem(1 + len(in) + 2*EventSize + 4 + 1)
	copy(m[1:], in)
	out := uint32(1 + len(in))
	nev := out + 2*EventSize
	want := slices.Clone(m)
	if e := call(t, s, m, "poll_oneoff", 1, uint64(out), 2, uint64(nev)); e != ESUCCESS {
		t.Fatal(e)
	}
	copy(want[out:], event(7, ESUCCESS, EventClock))
	copy(want[nev:], []byte{1, 0, 0, 0})
	expectMem(t, m, want)
	if !slices.Equal(c.sleeps, []int64{5_000_000}) || c.now != start+5_000_000 {
		t.Errorf("sleeps %v, clock moved by %d", c.sleeps, c.now-start)
	}

	// An absolute timeout counts from the clock's now; one in the past
	// fires without sleeping.
	c.sleeps = nil
	copy(m[1:], subscription(9, EventClock, ClockRealtime, uint64(c.now+2_000), 1))
	if e := call(t, s, m, "poll_oneoff", 1, uint64(out), 1, uint64(nev)); e != ESUCCESS || !slices.Equal(c.sleeps, []int64{2_000}) {
		t.Errorf("absolute: %v, sleeps %v", e, c.sleeps)
	}
	c.sleeps = nil
	copy(m[1:], subscription(9, EventClock, ClockRealtime, 5, 1))
	if e := call(t, s, m, "poll_oneoff", 1, uint64(out), 1, uint64(nev)); e != ESUCCESS || len(c.sleeps) != 0 {
		t.Errorf("absolute in the past: %v, sleeps %v", e, c.sleeps)
	}
	if !bytes.Equal(m[out:out+EventSize], event(9, ESUCCESS, EventClock)) {
		t.Errorf("event %v", m[out:out+EventSize])
	}
}

func TestPollOneoffFdIsAnErrorAtOnce(t *testing.T) {
	s, c, _, _ := sys()
	in := append(append(subscription(1, EventClock, ClockMonotonic, 1e9, 0), subscription(2, EventFdRead, 0, 0, 0)...),
		subscription(3, EventFdWrite, 9, 0, 0)...)
	m := mem(1 + len(in) + 3*EventSize + 4 + 1)
	copy(m[1:], in)
	out := uint32(1 + len(in))
	nev := out + 3*EventSize
	want := slices.Clone(m)
	if e := call(t, s, m, "poll_oneoff", 1, uint64(out), 3, uint64(nev)); e != ESUCCESS {
		t.Fatal(e)
	}
	copy(want[out:], event(2, ENOTSUP, EventFdRead))
	copy(want[out+EventSize:], event(3, EBADF, EventFdWrite))
	copy(want[nev:], []byte{2, 0, 0, 0})
	expectMem(t, m, want)
	if len(c.sleeps) != 0 {
		t.Errorf("slept %v with a descriptor event ready", c.sleeps)
	}
}

func TestPollOneoffErrors(t *testing.T) {
	s, c, _, _ := sys()
	sub := subscription(1, EventClock, ClockMonotonic, 10, 0)
	m := mem(1 + SubscriptionSize + EventSize + 4 + 1)
	copy(m[1:], sub)
	out := uint64(1 + SubscriptionSize)
	nev := out + EventSize
	before := slices.Clone(m)
	for _, tc := range []struct {
		name  string
		args  []uint64
		errno Errno
	}{
		{"no subscriptions", []uint64{1, out, 0, nev}, EINVAL},
		{"subscriptions past the end", []uint64{uint64(len(m) - SubscriptionSize + 1), out, 1, nev}, EFAULT},
		{"events past the end", []uint64{1, uint64(len(m) - EventSize + 1), 1, nev}, EFAULT},
		{"nevents past the end", []uint64{1, out, 1, uint64(len(m) - 3)}, EFAULT},
		{"count overflows", []uint64{1, out, 0x10000000, nev}, EFAULT},
	} {
		if e := call(t, s, m, "poll_oneoff", tc.args...); e != tc.errno {
			t.Errorf("%s: %v, want %v", tc.name, e, tc.errno)
		}
		expectMem(t, m, before)
	}
	copy(m[1:], subscription(1, 7, 0, 0, 0))
	if e := call(t, s, m, "poll_oneoff", 1, out, 1, nev); e != EINVAL {
		t.Errorf("unknown tag: %v", e)
	}
	copy(m[1:], subscription(1, EventClock, ClockMonotonic, 10, 2))
	if e := call(t, s, m, "poll_oneoff", 1, out, 1, nev); e != EINVAL {
		t.Errorf("unknown clock flag: %v", e)
	}
	if len(c.sleeps) != 0 {
		t.Errorf("a refused poll slept: %v", c.sleeps)
	}
}

func TestProcExit(t *testing.T) {
	s, _, _, _ := sys()
	f, _ := Lookup("proc_exit")
	_, err := f.Call(s, mem(4), []uint64{3})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || !errors.Is(err, ErrExit) {
		t.Errorf("proc_exit(3): %v", err)
	}
}

func TestUnsupportedAnswerNotsupOrBadf(t *testing.T) {
	s, _, _, _ := sys()
	handled := map[string]bool{
		"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
		"clock_res_get": true, "clock_time_get": true, "fd_fdstat_get": true, "fd_filestat_get": true,
		"fd_read": true, "fd_write": true, "poll_oneoff": true, "proc_exit": true, "random_get": true,
		"sched_yield": true, "fd_prestat_get": true, "fd_prestat_dir_name": true, "proc_raise": true,
	}
	for _, f := range Funcs {
		if handled[f.Name] {
			continue
		}
		fdArg := 0
		if f.Name == "path_symlink" {
			fdArg = 2
		}
		for fd, want := range map[uint64]Errno{1: ENOTSUP, 3: EBADF, 0xffffffff: EBADF} {
			m := mem(16)
			args := make([]uint64, len(f.Params))
			args[fdArg] = fd
			if e := call(t, s, m, f.Name, args...); e != want {
				t.Errorf("%s on fd %d: %v, want %v", f.Name, fd, e, want)
			}
			expectMem(t, m, mem(16))
		}
	}
	if e := call(t, s, mem(4), "fd_prestat_get", 3, 0); e != EBADF {
		t.Errorf("fd_prestat_get: %v (there are no preopens)", e)
	}
	if e := call(t, s, mem(4), "proc_raise", 9); e != ENOTSUP {
		t.Errorf("proc_raise: %v", e)
	}
	if e := call(t, s, mem(4), "sched_yield"); e != ESUCCESS {
		t.Errorf("sched_yield: %v", e)
	}
}

// The table has every function of wazero's WASI preview1 module, with the
// same signature.
func TestSignaturesMatchWazero(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := wasi_snapshot_preview1.NewBuilder(rt).Compile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defs := cm.ExportedFunctions()
	if len(defs) != len(Funcs) {
		t.Errorf("wazero has %d functions, the table %d", len(defs), len(Funcs))
	}
	conv := func(ts []api.ValueType) []ValType {
		var out []ValType
		for _, v := range ts {
			out = append(out, ValType(v))
		}
		return out
	}
	for name, d := range defs {
		f, ok := Lookup(name)
		if !ok {
			t.Errorf("%s is missing", name)
			continue
		}
		if !slices.Equal(f.Params, conv(d.ParamTypes())) || !slices.Equal(f.Results, conv(d.ResultTypes())) {
			t.Errorf("%s: %v -> %v, wazero %v -> %v", name, f.Params, f.Results, d.ParamTypes(), d.ResultTypes())
		}
	}
	for _, f := range Funcs {
		if _, ok := defs[f.Name]; !ok {
			t.Errorf("%s is not a WASI preview1 function", f.Name)
		}
	}
}

func TestErrnoString(t *testing.T) {
	if EBADF.String() != "EBADF" || !strings.HasPrefix(Errno(999).String(), "errno(") {
		t.Error(EBADF.String(), Errno(999).String())
	}
}
