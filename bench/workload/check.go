package workload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Check runs a workload of size n (n steps, turns or questions; stepsask
// asks two questions after its steps) on a runtime and checks it: the live
// run's result, on a host that parks instances and on one that does not
// (so every activation replays); that each live run's history replays to
// its end with every recorded op asked for again (host.CheckReplay); and
// that the Go guest's history of the same input replays on the runtime's
// module (a host.ReplayChecker), which is what the replay figures time.
// PlainGo checks Plain, live and fed from the Go guest's history. An error
// wrapping ErrUnavailable means this build or machine lacks the runtime.
func Check(rt Runtime, w Workload, n int) error {
	in := Input{Mode: w, N: n}
	if w == StepsAsk {
		in.Asks = 2
	}
	rec, err := record(in)
	if err != nil {
		return fmt.Errorf("recording on %s: %w", GoWazero, err)
	}
	if rt == PlainGo {
		if v, err := Plain(in, LiveOps()); err != nil || v != in.want() {
			return fmt.Errorf("plain %s n=%d: %d, %v", w, n, v, err)
		}
		rin, ops, err := ReplayOps(rec.hist)
		if err != nil {
			return err
		}
		if rin != in {
			return fmt.Errorf("the history's input is %+v, want %+v", rin, in)
		}
		if v, err := Plain(rin, ops); err != nil || v != in.want() {
			return fmt.Errorf("plain %s n=%d fed from its history: %d, %v", w, n, v, err)
		}
		return nil
	}
	dir, err := scratch("check")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	for i, maxWarm := range []int{0, -1} {
		err := func() error {
			s, err := open(hostConfig{path: filepath.Join(dir, fmt.Sprintf("db%d", i)), maxWarm: maxWarm, runtimes: []Runtime{rt}})
			if err != nil {
				return err
			}
			defer s.close()
			v, err := s.register(rt)
			if err != nil {
				return err
			}
			ri, err := s.call(in, v)
			if err != nil {
				return fmt.Errorf("live run (MaxWarm %d): %w", maxWarm, err)
			}
			hist, err := s.history(ri.ID)
			if err != nil {
				return err
			}
			rep, err := s.h.CheckReplay(ctx, hist, nil)
			if err == nil && (rep.End != "completed" || rep.Ops != rep.RecordedOps || rep.Ops == 0) {
				err = fmt.Errorf("%+v", rep)
			}
			if err != nil {
				return fmt.Errorf("replaying the live run's history (MaxWarm %d): %w", maxWarm, err)
			}
			if maxWarm != 0 || rt == GoWazero {
				return nil
			}
			mod, err := rt.module()
			if err != nil {
				return err
			}
			chk, err := s.h.NewReplayChecker(ctx, mod, rt.engine())
			if err == nil {
				rep, err = chk.Check(ctx, rec.hist)
			}
			if err == nil && (rep.End != "completed" || rep.Ops != rep.RecordedOps || rep.Ops == 0) {
				err = fmt.Errorf("%+v", rep)
			}
			if err != nil {
				return fmt.Errorf("replaying the Go guest's history: %w", err)
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("%s %s n=%d: %w", rt, w, n, err)
		}
	}
	return nil
}
