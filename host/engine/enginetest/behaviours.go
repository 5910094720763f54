package enginetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
)

// The cases every engine with guests of its own runs, each on the guest
// that shows its Behaviour.

func cpuLimit(t *testing.T, c *Case) {
	c.Config.CPULimit = 100 * time.Millisecond
	start := time.Now()
	_, inst, err := c.runGuest(context.Background(), TightLoop)
	c.expectLimit(t, err, "cpu", 100)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %s", d)
	}
	expectClosed(t, inst)
}

func memoryLimit(t *testing.T, c *Case) {
	c.Config.MemoryLimit = 2 << 20
	_, inst, err := c.runGuest(context.Background(), GrowLoop)
	c.expectLimit(t, err, "memory", 2<<20)
	expectClosed(t, inst)
}

// A failure that is not a limit, in a guest whose memory limit is small:
// a trap, or an exception nothing catches, which a guest that reports its
// outcome by op reports (the instance then stays usable).
func failure(t *testing.T, c *Case) {
	c.Config.MemoryLimit = 2 << 20
	_, inst, err := c.runGuest(context.Background(), Fail)
	var ge *engine.GuestError
	if !errors.As(err, &ge) || ge.ExitCode != nil || errors.Is(err, engine.ErrLimit) {
		t.Fatalf("want a *GuestError that is no limit, got %v", err)
	}
	if !errors.As(err, new(reported)) {
		expectClosed(t, inst)
	}
}

func contextCancel(t *testing.T, c *Case) {
	c.Config.CPULimit = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, inst, err := c.runGuest(ctx, TightLoop)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %s", d)
	}
	expectClosed(t, inst)
}

// The first op the handler fails ends the guest at once, with the
// handler's error itself.
func opHandlerError(t *testing.T, c *Case) {
	boom := errors.New("the handler gives up")
	ops := 0
	c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		ops++
		return nil, boom
	})
	_, inst, err := c.runGuest(context.Background(), TwoOpsThenLoop)
	if err != boom {
		t.Fatalf("Call returned %v, want the handler's error itself", err)
	}
	if ops != 1 {
		t.Errorf("%d ops ran", ops)
	}
	expectClosed(t, inst)
}

// answerValue is the value of the answer opAnswer's handler gives, JSON
// so that a guest that sees answers as values can read it.
const answerValue = `{"n":"abc"}`

func opAnswer(t *testing.T, c *Case) {
	var gotName string
	calls := 0
	c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		gotName = string(name)
		calls++
		return append(make([]byte, abi.BodyHeaderSize), answerValue...), nil
	})
	res, _, err := c.runGuest(context.Background(), AnswerLength)
	if want := int32(abi.BodyHeaderSize + len(answerValue)); err != nil || res != want || gotName != "" || calls != 1 {
		t.Fatalf("op answered %d, %v (name %q, %d ops); want %d", res, err, gotName, calls, want)
	}
}

// Ops reach the handler with their kind, name and payload as the guest
// made them; an answer that fits the guest's buffer (WebAssembly's 64
// bytes) is written there, and one that does not is held for
// sandflow.read.
func opsRoundTrip(t *testing.T, c *Case) {
	const small = 10
	okay := append(make([]byte, abi.BodyHeaderSize), `"okay"`...)
	big := append(make([]byte, abi.BodyHeaderSize), '"')
	big = append(append(big, bytes.Repeat([]byte("0123456789"), 10)[:98]...), '"')
	var ops int
	var first []byte // the first op's kind, name and payload
	c.Config.Ops = OpFunc(func(_ context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		ops++
		op := append(append([]byte{byte(kind), byte(kind >> 8), byte(kind >> 16), byte(kind >> 24)}, name...), payload...)
		if first == nil {
			first = op
		}
		if string(name) != "ping" || !bytes.Contains(payload, []byte("abc")) || !bytes.Equal(op, first) {
			t.Errorf("op %d: %s name %q payload %q, unlike the first", ops, kind, name, payload)
		}
		if ops > small {
			return big, nil
		}
		return okay, nil
	})
	res, _, err := c.runGuest(context.Background(), RoundTrips)
	want := int32(small*len(okay) + len(big) + int(big[len(big)-2]))
	if err != nil || res != want {
		t.Fatalf("the guest returned %d, %v; want %d", res, err, want)
	}
	if ops != small+1 {
		t.Errorf("%d ops reached the handler, want %d", ops, small+1)
	}
}

// Time a guest spends waiting in a host call under the PauseCPU of the
// budget BudgetOf finds in the op's context does not count against its
// CPU limit; without PauseCPU it does (on an engine whose op time is not
// free anyway).
func pauseCPU(t *testing.T, c *Case) {
	pauses := []bool{true, false}
	if c.lang != nil && c.lang.OpTimeFree {
		pauses = pauses[:1]
	}
	for _, pause := range pauses {
		c.Config.CPULimit = 100 * time.Millisecond
		c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
			if pause {
				defer engine.BudgetOf(ctx).PauseCPU()()
			}
			time.Sleep(300 * time.Millisecond)
			return make([]byte, 8), nil
		})
		res, _, err := c.runGuest(context.Background(), OpThenCount)
		if pause && (err != nil || res != 1) {
			t.Errorf("paused: %d %v", res, err)
		}
		if !pause && !errors.Is(err, engine.ErrCPULimit) {
			t.Errorf("not paused: want the CPU limit, got %d %v", res, err)
		}
	}
}

// The budget BudgetOf finds in an op's context restarts: RestartCPU gives
// the call a fresh budget. The case spends the budget inside the ops: it
// does not apply to an engine whose op time is free.
func restartCPU(t *testing.T, c *Case) {
	c.Config.CPULimit = 150 * time.Millisecond
	c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		time.Sleep(100 * time.Millisecond)
		engine.BudgetOf(ctx).RestartCPU()
		return make([]byte, 8), nil
	})
	// Three ops of 100ms each: 300ms in all, but never 150ms since the
	// last restart.
	if res, _, err := c.runGuest(context.Background(), ThreeOps); err != nil || res != 1 {
		t.Errorf("%d %v", res, err)
	}
}

// What the guest writes to stdout and stderr reaches the configured
// writers.
func stdout(t *testing.T, c *Case) {
	res, _, err := c.runGuest(context.Background(), WriteHi)
	if err != nil || res != 1 {
		t.Fatalf("%d %v", res, err)
	}
	if out, errOut := c.Config.Stdout.(*bytes.Buffer).String(), c.Config.Stderr.(*bytes.Buffer).String(); out != "hi\n" || errOut != "ho\n" {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

// The guest's clock and random bytes are the InstanceConfig's: the same
// clock and generator give the same result, and another of either
// another one.
func clockAndRandom(t *testing.T, c *Case) {
	run := func(clock int64, random byte) int32 {
		t.Helper()
		c.Config.Clock, c.Config.Random = &StillClock{Nanos: clock}, fill(random)
		res, _, err := c.runGuest(context.Background(), ClockAndRandom)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	base := run(startClock, randomByte)
	if c.lang == nil {
		// The WebAssembly guest returns both clocks and the generator's
		// first four bytes, summed.
		now := startClock
		if want := int32(2*uint32(now) + 0x5a5a5a5a); base != want {
			t.Errorf("sandflow_run returned %d; want %d (the clock twice and the generator's bytes)", base, want)
		}
	}
	if again := run(startClock, randomByte); again != base {
		t.Errorf("the same clock and generator gave %d, then %d", base, again)
	}
	if other := run(startClock, randomByte+1); other == base {
		t.Errorf("another generator gave the same %d", other)
	}
	if later := run(startClock+int64(time.Second), randomByte); later == base {
		t.Errorf("another clock gave the same %d", later)
	}
}
