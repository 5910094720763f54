package jsprogram

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	jsworker "github.com/sandflow/sandflow/jsprogram/internal/worker"
)

// ErrPoolClosed is returned when a program is run on a closed engine.
var ErrPoolClosed = errors.New("jsprogram: engine closed")

type frame struct {
	typ  byte
	body []byte
}

// worker is one re-executed process that runs activations, one at a time.
type worker struct {
	cmd    *exec.Cmd
	in     *bufio.Writer
	stdin  io.Closer
	frames chan frame
	// exited is closed when the process has been waited for; err is then
	// its exit error.
	exited chan struct{}
	err    error
	stderr *tail
	// readDone is closed when the frame reader stopped (end of output).
	readDone chan struct{}
	// long: the worker holds a slot of the long lane, not the short one.
	long bool
}

// tail keeps the first and the last bytes written to it: a Go runtime's
// fatal error says what happened first, then dumps every goroutine.
type tail struct {
	mu   sync.Mutex
	head []byte
	buf  []byte
	max  int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max/4 - len(t.head); room > 0 {
		t.head = append(t.head, p[:min(room, len(p))]...)
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String is the head, then the tail when it goes past the head.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) <= len(t.head) {
		return string(t.head)
	}
	return string(t.head) + "\n...\n" + string(t.buf)
}

func (t *tail) reset() {
	t.mu.Lock()
	t.head, t.buf = t.head[:0], t.buf[:0]
	t.mu.Unlock()
}

// pool supervises workers: it starts them, keeps a few idle, bounds how
// many run at once, and replaces dead ones.
//
// Programs run in two lanes. Every activation starts in the short lane,
// whose slots (maxWorkers) bound how many programs start at once. One that
// has computed for a while (Options.LongAfter) moves to the long lane when
// it has room, freeing its short slot, and its worker's CPU priority is
// lowered: programs that spin for their whole JavaScript time cannot hold
// every slot, so short programs keep starting while they run, and get the
// CPU first. When the long lane is full a long program stays in its short
// slot. At most maxWorkers + maxLong workers run. See RATIONALE.md, "Why
// two lanes of JavaScript workers?".
type pool struct {
	path    string
	memory  int64
	maxIdle int
	slots   chan struct{}
	long    chan struct{}

	mu     sync.Mutex
	idle   []*worker
	live   map[*worker]bool
	closed bool
}

func newPool(path string, memory int64, maxWorkers, maxLong, maxIdle int) *pool {
	return &pool{path: path, memory: memory, maxIdle: maxIdle, slots: make(chan struct{}, maxWorkers), long: make(chan struct{}, maxLong), live: map[*worker]bool{}}
}

// promote moves a running worker to the long lane if it has room, and
// reports whether it did.
func (p *pool) promote(w *worker) bool {
	if w.long {
		return true
	}
	select {
	case p.long <- struct{}{}:
	default:
		return false
	}
	w.long = true
	<-p.slots
	return true
}

// get takes a worker, starting one if none is idle; it waits for a slot
// when maxWorkers are busy.
func (p *pool) get(ctx context.Context) (*worker, error) {
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		w := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if w.alive() {
			p.mu.Unlock()
			w.stderr.reset()
			return w, nil
		}
		w.kill()
	}
	p.mu.Unlock()
	w, err := p.start()
	if err != nil {
		<-p.slots
		return nil, err
	}
	return w, nil
}

// acquire takes a short-lane slot, waiting when maxWorkers are busy: for a
// worker from get, or a parked one that resumes.
func (p *pool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		<-p.slots
		return ErrPoolClosed
	}
	return nil
}

// release gives back the slot a worker holds, keeping the worker out of
// the pool: its program is parked.
func (p *pool) release(w *worker) {
	slot := p.slots
	if w.long {
		slot, w.long = p.long, false
	}
	<-slot
}

// put gives a worker back; one that is not healthy is killed, and so is
// one from the long lane, whose priority cannot be raised again.
func (p *pool) put(w *worker, healthy bool) {
	defer p.release(w)
	p.mu.Lock()
	if healthy && !p.closed && len(p.idle) < p.maxIdle && w.alive() {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.kill()
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.kill()
	}
}

func (p *pool) start() (*worker, error) {
	cmd := exec.Command(p.path)
	// A minimal environment: nothing of the host's leaks in, and the
	// program's clock zone is UTC.
	cmd.Env = []string{proto.WorkerEnv + "=1", proto.MemoryEnv + "=" + strconv.FormatInt(p.memory, 10), "TZ=UTC", "GOMAXPROCS=1"}
	cmd.Dir = os.TempDir()
	setProcAttr(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, in: bufio.NewWriterSize(stdin, 64<<10), stdin: stdin, frames: make(chan frame, 16),
		exited: make(chan struct{}), readDone: make(chan struct{}), stderr: &tail{max: 8 << 10}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("jsprogram: starting a worker (%s): %w", p.path, err)
	}
	p.mu.Lock()
	p.live[w] = true
	p.mu.Unlock()
	go func() {
		defer close(w.readDone)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			typ, body, err := proto.ReadFrame(r)
			if err != nil {
				close(w.frames)
				return
			}
			w.frames <- frame{typ, body}
		}
	}()
	go func() {
		<-w.readDone
		w.err = cmd.Wait()
		p.mu.Lock()
		delete(p.live, w)
		p.mu.Unlock()
		close(w.exited)
	}()
	return w, nil
}

func (w *worker) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// send writes a frame, in parts when it is too large for one.
func (w *worker) send(typ byte, parts ...[]byte) error {
	return proto.WriteLarge(w.in, typ, parts...)
}

// kill ends the process and waits for it.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	_ = w.stdin.Close()
	go func() {
		for range w.frames {
		}
	}()
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
	}
}

// death says why a worker died, from its exit and the end of its stderr.
func (w *worker) death(lim Limits) *WorkflowProgramError {
	select {
	case <-w.exited:
	case <-time.After(2 * time.Second):
		w.kill()
	}
	errText := w.stderr.String()
	code := -1
	if w.cmd.ProcessState != nil {
		code = w.cmd.ProcessState.ExitCode()
	}
	switch {
	case code == proto.ExitMemory, strings.Contains(errText, "out of memory"), strings.Contains(errText, "cannot allocate memory"):
		return &WorkflowProgramError{Code: CodeMemory, Message: fmt.Sprintf("the program used more than the memory limit of %d MiB", lim.MemoryBytes>>20)}
	case strings.Contains(errText, "stack exceeds"), strings.Contains(errText, "stack overflow"):
		return &WorkflowProgramError{Code: CodeStackOverflow, Message: "the program overflowed the stack inside a built-in function"}
	}
	msg := "the program's worker process died"
	if w.err != nil {
		msg += ": " + w.err.Error()
	}
	if t := strings.TrimSpace(errText); t != "" {
		if len(t) > 600 {
			t = t[:600] + "..."
		}
		msg += "; " + t
	}
	return &WorkflowProgramError{Code: CodeWorkerCrashed, Message: msg}
}

// Stats describe an engine's workers.
type Stats struct {
	// Workers is how many worker processes are alive, Idle how many of
	// them wait for a program, Long how many run programs in the long
	// lane.
	Workers, Idle, Long int
	// RSSBytes is the resident memory of all of them (0 where the
	// system does not say).
	RSSBytes int64
	// Parked is how many suspended programs are parked in their workers
	// (counted in Workers too), and ParkedBytes what those workers held
	// when their programs parked.
	Parked      int
	ParkedBytes int64
	// ParkedResumes counts the resumes that ran on a parked program, and
	// ParkedLost those that found it gone (evicted, or its worker dead)
	// and replayed.
	ParkedResumes, ParkedLost int64
	// LogReplayedOps counts the replayed ops workers answered from the
	// run's log (and the host then checked) instead of by a round trip.
	LogReplayedOps int64
}

func (p *pool) stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{Workers: len(p.live), Idle: len(p.idle), Long: len(p.long)}
	for w := range p.live {
		st.RSSBytes += jsworker.RSSBytes(w.cmd.Process.Pid)
	}
	return st
}

// MaybeWorker turns this process into a program worker when it was started
// as one, and then never returns. Call it first in main (and in TestMain of
// tests that run programs): the host runs programs in re-executed copies of
// its own binary.
func MaybeWorker() {
	if os.Getenv(proto.WorkerEnv) != "1" {
		return
	}
	os.Exit(jsworker.Main(os.Stdin, os.Stdout))
}
