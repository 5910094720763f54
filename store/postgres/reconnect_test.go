package postgres

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// terminate kills, on the server, every connection whose
// application_name is app, and returns how many it killed.
func terminate(t *testing.T, app string) int {
	t.Helper()
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	var n int
	if err := conn.QueryRow(ctxBG, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// withApp is the test server's connection string with an
// application_name that names the store's connections.
func withApp(t *testing.T, app string) string {
	dsn := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "application_name=" + app
}

// The server kills every connection of the store (as a restart or an
// administrator does): the next calls, reads and writes, succeed on new
// connections, and nothing is lost or written twice. With retries off,
// the same kill makes the first call fail, which shows the kill landed.
func TestReconnectAfterTerminatedConnections(t *testing.T) {
	for _, retry := range []bool{true, false} {
		t.Run(map[bool]string{true: "retry", false: "no retry"}[retry], func(t *testing.T) {
			app := "sandflow_reconnect_" + map[bool]string{true: "a", false: "b"}[retry]
			schema := newSchema(t)
			opts := &Options{Schema: schema, MaxConns: 3}
			if !retry {
				opts.RetryFor = -1
			}
			s, err := Open(ctxBG, withApp(t, app), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mustCreate(t, s, "r")
			var last uint64
			// Fill the pool with idle connections: several calls at once.
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() { defer wg.Done(); s.Run(ctxBG, "r") }()
			}
			wg.Wait()
			for round := range 3 {
				if n := terminate(t, app); n == 0 {
					t.Fatalf("round %d: no connection of the store to kill", round)
				}
				err := s.Append(ctxBG, "r", last, step(last))
				if !retry {
					if err == nil {
						t.Fatalf("Append on a killed connection with retries off succeeded: the kill missed")
					}
					if errors.Is(err, store.ErrSeqConflict) {
						t.Fatalf("Append on a killed connection: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("round %d: Append after the kill: %v", round, err)
				}
				last += 2
				terminate(t, app)
				r, err := s.Run(ctxBG, "r")
				if err != nil || r.LastSeq != last {
					t.Fatalf("round %d: Run after the kill = LastSeq %d, %v; want %d", round, r.LastSeq, err, last)
				}
			}
			evs, err := s.Events(ctxBG, "r", 0, 0)
			if err != nil || uint64(len(evs)) != last {
				t.Fatalf("Events = %d, %v; want %d", len(evs), err, last)
			}
		})
	}
}

// SANDFLOW_TEST_POSTGRES_RESTART, when set, is a command that restarts the
// test server (the shell command SANDFLOW_TEST_POSTGRES_RESTART gives). A writer keeps appending
// while it runs: every Append either succeeds or fails with an error, the
// writer goes on from what the store says, and after the restart the
// appends succeed again. It restarts the server every other test uses, so
// it runs only when asked.
func TestServerRestart(t *testing.T) {
	cmdline := os.Getenv("SANDFLOW_TEST_POSTGRES_RESTART")
	if cmdline == "" {
		t.Skip("SANDFLOW_TEST_POSTGRES_RESTART not set: this test restarts the server, set it to the shell command that restarts the test server")
	}
	schema := newSchema(t)
	s := openSchema(t, schema, Options{RetryFor: 30 * time.Second})
	mustCreate(t, s, "r")
	var last uint64
	var stop atomic.Bool
	var failed, ok atomic.Int64
	done := make(chan error)
	go func() {
		for !stop.Load() {
			err := s.Append(ctxBG, "r", last, step(last))
			switch {
			case err == nil:
				last += 2
				ok.Add(1)
			case errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, store.ErrSeqConflict):
				// Read where the log is, as the host does.
				failed.Add(1)
				r, rerr := s.Run(ctxBG, "r")
				if rerr != nil {
					done <- rerr
					return
				}
				last = r.LastSeq
			default:
				done <- err
				return
			}
		}
		done <- nil
	}()
	time.Sleep(200 * time.Millisecond)
	before := ok.Load()
	f := strings.Fields(cmdline)
	if out, err := exec.Command(f[0], f[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	after := ok.Load()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("writer across the restart: %v", err)
	}
	t.Logf("appends: %d before the restart, %d during, %d after; %d answered with an unknown outcome or conflict", before, after-before, ok.Load()-after, failed.Load())
	if ok.Load() == after {
		t.Fatal("no Append succeeded after the restart")
	}
	evs, err := s.Events(ctxBG, "r", 0, 0)
	if err != nil || uint64(len(evs)) != last {
		t.Fatalf("Events = %d, %v; want %d", len(evs), err, last)
	}
}
