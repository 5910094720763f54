//go:build unix

package chaos

import (
	"context"
	"flag"
	"os"
	"strconv"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Int64("chaos.seed", 0, "the crash harness's seed (0: SANDFLOW_CHAOS_SEED, else from the clock)")
	runsFlag  = flag.Int("chaos.runs", 0, "runs to drive (0: the version's own, 30 short, 80 long)")
	killsFlag = flag.Int("chaos.kills", 0, "SIGKILLs of the server (0: the version's own, 20 short, 60 long)")
)

// harnessSeed is -chaos.seed, else SANDFLOW_CHAOS_SEED, else the clock.
func harnessSeed(t *testing.T) int64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if v := os.Getenv("SANDFLOW_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("SANDFLOW_CHAOS_SEED=%q is not a number", v)
		}
		return s
	}
	return time.Now().UnixNano() % 1_000_000_000
}

// TestCrashHarness kills sandflow serve while it drives runs, restarts
// it, and checks that nothing acknowledged is lost, that every run ends
// once, that no step runs more often than its log records, that no timer
// fires twice and that the store verifies. Without the chaos build tag it
// is the short version; go test -tags chaos runs the long one.
func TestCrashHarness(t *testing.T) {
	cfg := harnessConfig
	cfg.Seed = harnessSeed(t)
	if *runsFlag > 0 {
		cfg.Runs = *runsFlag
	}
	if *killsFlag > 0 {
		cfg.Kills = *killsFlag
	}
	// SANDFLOW_CHAOS_DIR keeps the work directory (binary, data, the
	// server's log, the counter's file) for a look after a failure.
	cfg.Dir = os.Getenv("SANDFLOW_CHAOS_DIR")
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	} else if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("chaos: work directory %s kept", cfg.Dir)
	}
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		t.Log(rep.Summary())
		for _, f := range rep.Findings {
			t.Errorf("chaos finding (seed %d): %s", cfg.Seed, f)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
