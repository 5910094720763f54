package jsprogram_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/jsprogram"
)

// spin starts n endless loops and returns a wait for their ends, each of
// which must be js_time_limit.
func spin(t *testing.T, f *fixture, n int) (wait func()) {
	var wg sync.WaitGroup
	codes := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ri := f.run(`for (;;) {}`)
			if e, ok := jsprogram.FromObject(ri.Error); ok {
				codes[i] = e.Code
			}
		}()
	}
	return func() {
		wg.Wait()
		for i, c := range codes {
			if c != jsprogram.CodeJSTime {
				t.Errorf("loop %d ended with %q, want %s", i, c, jsprogram.CodeJSTime)
			}
		}
	}
}

// Programs that spin for their whole JavaScript time do not keep short
// programs from starting. Regression: with every worker slot held by an
// endless loop, any other workflow call waited until a loop hit its time
// limit (30 s by default).
func TestShortProgramsRunWhileLoopsSpin(t *testing.T) {
	const jsTime = 10 * time.Second
	f := newFixtureWith(t, jsprogram.Options{MaxWorkers: 2, Limits: jsprogram.Limits{JSTime: jsTime, TotalTime: time.Minute}})
	f.run(`return 1;`) // a worker started
	wait := spin(t, f, 3)
	defer wait()
	// The loops have moved to the long lane (after 1 s of computing).
	time.Sleep(3 * time.Second)
	start := time.Now()
	if got := result[int](t, f.run(`return 6 * 7;`)); got != 42 {
		t.Fatalf("result %d", got)
	}
	// Well under what is left of the loops' time: the call did not wait
	// for one of them to end.
	if took := time.Since(start); took > jsTime/3 {
		t.Fatalf("a short program took %s while 3 loops ran on 2 worker slots; it waited for a loop", took)
	}
}

// The engine's default bounds the programs that start at once by the
// CPUs, never below 4.
func TestDefaultMaxWorkers(t *testing.T) {
	if n := jsprogram.DefaultMaxWorkers(); n != max(4, 2*runtime.GOMAXPROCS(0)) {
		t.Fatalf("DefaultMaxWorkers() = %d, want max(4, 2 × CPUs)", n)
	}
}

// The lanes bound the workers: with one slot in each, four loops never
// run more than two workers, one of them in the long lane, and each loop
// still ends at its time limit.
func TestLanesBoundTheWorkers(t *testing.T) {
	f := newFixtureWith(t, jsprogram.Options{MaxWorkers: 1, LongWorkers: 1, IdleWorkers: 1, LongAfter: 200 * time.Millisecond,
		Limits: jsprogram.Limits{JSTime: 2 * time.Second, TotalTime: time.Minute}})
	wait := spin(t, f, 4)
	sawLong := false
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st := f.JS.Stats()
		if st.Workers > 2 || st.Long > 1 {
			t.Fatalf("stats %+v: over one worker per lane", st)
		}
		sawLong = sawLong || st.Long == 1
		time.Sleep(20 * time.Millisecond)
	}
	if !sawLong {
		t.Error("no loop moved to the long lane")
	}
	wait()
}
