package worker

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	"github.com/sandflow/sandflow/jsprogram/internal/replay"

	"github.com/dop251/goja"
)

//go:embed shim.js
var shimSource string

var shimProgram = goja.MustCompile("shim.js", shimSource, true)

func Main(in io.Reader, out io.Writer) int {
	time.Local = time.UTC
	if v := os.Getenv(proto.MemoryEnv); v != "" {
		var n int64
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			capMemory(n)
		}
	}
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	cache := newProgramCache(32)
	for {
		typ, body, err := proto.ReadFrame(r)
		if errors.Is(err, io.EOF) {
			return proto.ExitOK
		}
		if err != nil || typ != proto.FrameActivate {
			fmt.Fprintf(os.Stderr, "jsprogram worker: want an activation, got frame %q: %v\n", typ, err)
			return proto.ExitProtocol
		}
		var a proto.Activation
		if err := json.Unmarshal(body, &a); err != nil {
			fmt.Fprintf(os.Stderr, "jsprogram worker: bad activation: %v\n", err)
			return proto.ExitProtocol
		}
		s := &session{r: r, w: w, act: a, lim: proto.WithDefaults(a.Limits, proto.DefaultLimits), cache: cache, now: a.Now}
		if a.Log {
			l, err := readLog(r, s.lim)
			if err != nil {
				fmt.Fprintf(os.Stderr, "jsprogram worker: reading the log: %v\n", err)
				return proto.ExitProtocol
			}
			s.rp = replay.New(l, a.Now)
		}
		d := s.run()
		raw, _ := json.Marshal(d)
		if err := s.sendAnswered(); err != nil {
			return proto.ExitProtocol
		}
		if err := proto.WriteFrame(w, proto.FrameDone, raw); err != nil {
			return proto.ExitProtocol
		}
		if s.broken {
			return proto.ExitProtocol
		}
	}
}

// programCache keeps compiled programs (workflow tool bodies) and tool
// scripts by the hash of their source: a run that resumes replays the same
// one.
type programCache struct {
	bodies  *compileCache[*goja.Program]
	scripts *compileCache[*script]
}

func newProgramCache(n int) *programCache {
	return &programCache{bodies: newCompileCache(n, compileBody), scripts: newCompileCache(n, compileScript)}
}

func (c *programCache) get(js string) (*goja.Program, *proto.WorkflowProgramError) {
	return c.bodies.get(js)
}

func (c *programCache) script(src string) (*script, *proto.WorkflowProgramError) {
	return c.scripts.get(src)
}

// compileCache holds the last max things compile made, by source hash.
type compileCache[T any] struct {
	max     int
	order   []string
	m       map[string]T
	compile func(string) (T, *proto.WorkflowProgramError)
}

func newCompileCache[T any](max int, compile func(string) (T, *proto.WorkflowProgramError)) *compileCache[T] {
	return &compileCache[T]{max: max, m: map[string]T{}, compile: compile}
}

func (c *compileCache[T]) get(src string) (T, *proto.WorkflowProgramError) {
	sum := sha256.Sum256([]byte(src))
	key := string(sum[:])
	if v, ok := c.m[key]; ok {
		return v, nil
	}
	v, perr := c.compile(src)
	if perr != nil {
		return v, perr
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, key)
	c.m[key] = v
	return v, nil
}

// capMemory bounds the worker's memory at n bytes three ways: the garbage
// collector works harder as the heap nears n; a watchdog ends the process
// when what the runtime holds stays over n (a loop that keeps what it
// allocates); and the address space is capped, so that one allocation no
// collection can make room for ('x'.repeat(2**40)) fails in the kernel
// instead of taking the machine's memory. The parent reports each as
// memory_limit.
func capMemory(n int64) {
	debug.SetMemoryLimit(n)
	setAddressSpaceLimit(n)
	go watchMemory(uint64(n))
}

// heldBytes is the memory the runtime holds from the system: all it
// mapped, less what it gave back.
func heldBytes() uint64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	return samples[0].Value.Uint64() - samples[1].Value.Uint64()
}

func watchMemory(n uint64) {
	over := 0
	for range time.Tick(10 * time.Millisecond) {
		held := heldBytes()
		if held <= n {
			over = 0
			continue
		}
		// Over for a moment can be garbage the collector has yet to take
		// back; over for 50 ms with the collector at it is not.
		if over++; over >= 5 {
			fmt.Fprintf(os.Stderr, "jsprogram worker: out of memory: holding %d bytes, over the limit of %d\n", held, n)
			os.Exit(proto.ExitMemory)
		}
	}
}

// jsonDepth is how deeply JSON text nests (0 for a scalar).
func jsonDepth(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
