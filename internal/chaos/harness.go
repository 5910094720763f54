package chaos

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

// Config says how hard Run shakes the server.
type Config struct {
	// Seed picks the runs' plans and the kills; Run prints it.
	Seed int64
	// Runs is how many runs are driven, all at once.
	Runs int
	// Kills is how many times the server is killed with SIGKILL and
	// started again.
	Kills int
	// A server lives between MinUp and MaxUp before its kill. A share
	// AckShare of the kills (picked by the seed) come instead within
	// AfterAck of an acknowledged answer, hook resume or webhook request
	// (half of them at once, most others soon after), where a write
	// acknowledged before it is durable is lost.
	MinUp, MaxUp, AfterAck time.Duration
	AckShare               float64
	// Settle is how long the runs have, after the last restart, to end.
	Settle time.Duration
	// Dir is the work directory: the binary, the data directory, the
	// server's log and the counter's file go there.
	Dir string
	// Root is the repository root; empty finds it above the working
	// directory.
	Root string
	// Logf, when set, gets progress lines.
	Logf func(format string, args ...any)
}

// ErrHarness is returned (wrapped) when the harness itself could not do
// its work: a build, a start, an upload, or answers it cannot account
// for. Findings about the server are in the Report, not errors.
var ErrHarness = errors.New("chaos harness")

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run builds sandflow and the test tool, drives cfg.Runs runs against a
// server it kills cfg.Kills times, and checks the invariants. The Report
// is complete when the error is nil.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.logf("chaos: seed %d (SANDFLOW_CHAOS_SEED=%d reproduces the plans and kills)", cfg.Seed, cfg.Seed)
	root := cfg.Root
	if root == "" {
		var err error
		if root, err = guestbuild.RepoRoot(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHarness, err)
		}
	}
	var bin, wasm string
	var binErr, wasmErr error
	var wg sync.WaitGroup
	wg.Go(func() { bin, binErr = buildSandflow(ctx, root, cfg.Dir) })
	wg.Go(func() {
		wasm, wasmErr = guestbuild.Build(filepath.Join(root, "internal", "chaos", "testdata", "guest"))
	})
	wg.Wait()
	if err := errors.Join(binErr, wasmErr); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	began := time.Now()
	cfg.logf("chaos: built sandflow and the test tool")

	cnt, err := startCounter(filepath.Join(cfg.Dir, "effects.log"))
	if err != nil {
		return nil, fmt.Errorf("%w: counter: %v", ErrHarness, err)
	}
	defer cnt.close()
	agents := filepath.Join(cfg.Dir, "agents.json")
	if err := os.WriteFile(agents, []byte(agentsFile), 0o600); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	srv := &server{bin: bin, data: filepath.Join(cfg.Dir, "data"), agents: agents, addr: addr,
		apiToken: "chaos-api-" + randHex(), adminToken: "chaos-admin-" + randHex(),
		logPath: filepath.Join(cfg.Dir, "serve.log")}
	if err := srv.start(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.kill()
		}
	}()
	hc := &http.Client{Timeout: 10 * time.Second}
	cl := &api{base: "http://" + addr, token: srv.apiToken, c: hc}
	// The upload compiles the tool, which on a loaded machine takes far
	// longer than a driving request may.
	setUpClient := &api{base: cl.base, token: cl.token, c: &http.Client{Timeout: 5 * time.Minute}}
	if err := setUp(ctx, setUpClient, srv.adminToken, wasm, filepath.Join(root, "internal", "chaos", "testdata", "guest", "manifest.json")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}

	// The runs start spread over most of the time the kills take, so
	// that every server has runs to drive.
	spread := time.Duration(cfg.Kills) * (cfg.MinUp + cfg.MaxUp) / 2 * 3 / 4
	ps := plans(cfg.Seed, cfg.Runs, cnt.url, spread)
	d := &driver{api: cl, srv: srv, cancelSent: map[string]bool{}}
	driveCtx, stopDriving := context.WithCancel(ctx)
	defer stopDriving()
	var drivers, worker sync.WaitGroup
	for _, p := range ps {
		drivers.Go(func() { d.drive(driveCtx, p) })
	}
	worker.Go(func() { d.agentWorker(driveCtx) })

	kills, err := killLoop(ctx, cfg, srv, d)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	cfg.logf("chaos: %d kills done after %s; the runs have %s to end", kills, time.Since(began).Round(time.Millisecond), cfg.Settle)
	allDone := make(chan struct{})
	go func() { drivers.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(cfg.Settle):
		cfg.logf("chaos: not every run ended within %s", cfg.Settle)
	case <-ctx.Done():
	}
	cfg.logf("chaos: driving ended after %s", time.Since(began).Round(time.Millisecond))
	stopDriving()
	drivers.Wait()
	worker.Wait()
	ev := Evidence{Acks: d.acks, Runs: map[string]*RunLog{}, CancelSent: d.cancelSent}
	for _, p := range ps {
		if l, ok := streamRun(ctx, cl, p.ID); ok {
			ev.Runs[p.ID] = l
		}
	}
	stopped = true
	if err := srv.stop(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}

	rep := &Report{Seed: cfg.Seed, Runs: len(ps), Kills: kills}
	rep.Findings = doctor(ctx, srv)
	ev.Effects = cnt.effects()
	for _, p := range ps {
		if ev.Runs[p.ID] == nil {
			ev.Runs[p.ID] = readRun(ctx, srv, p.ID) // not ended, or not streamed
		}
	}
	Check(ev, rep)
	cfg.logf("chaos: checked after %s", time.Since(began).Round(time.Millisecond))
	if err := errors.Join(d.errs...); err != nil {
		return rep, fmt.Errorf("%w: answers it cannot account for: %v", ErrHarness, err)
	}
	return rep, nil
}

func randHex() string {
	b := make([]byte, 16)
	crand.Read(b)
	return hex.EncodeToString(b)
}

// setUp uploads the test tool and registers the workflow tool.
func setUp(ctx context.Context, cl *api, adminToken, wasm, manifest string) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for field, path := range map[string]string{"module": wasm, "manifest": manifest} {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fw, err := mw.CreateFormFile(field, filepath.Base(path))
		if err != nil {
			return err
		}
		fw.Write(b)
	}
	mw.Close()
	req, err := http.NewRequestWithContext(ctx, "POST", cl.base+"/v1/plugins", &body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := cl.c.Do(req)
	if err != nil {
		return fmt.Errorf("uploading the test tool: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("uploading the test tool: %s", resp.Status)
	}
	st, err := cl.doURL(ctx, "POST", cl.base+"/v1/workflow-tool", adminToken, map[string]any{"maxSubagents": 10}, nil)
	if err != nil {
		return fmt.Errorf("registering the workflow tool: %v", err)
	}
	if st != http.StatusCreated {
		return fmt.Errorf("registering the workflow tool: status %d", st)
	}
	return nil
}

// killLoop kills the server cfg.Kills times, each time starting it again,
// and returns the kills done.
func killLoop(ctx context.Context, cfg Config, srv *server, d *driver) (int, error) {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6b696c6c))
	for k := 1; k <= cfg.Kills; k++ {
		up := cfg.MinUp + time.Duration(rng.Int64N(int64(cfg.MaxUp-cfg.MinUp)+1))
		afterAck := rng.Float64() < cfg.AckShare
		// Half the kills aimed at an ack come at once (an ack must
		// outlive even that), the others mostly soon after it.
		u := rng.Float64()
		delay := time.Duration(u * u * float64(cfg.AfterAck))
		if rng.IntN(2) == 0 {
			delay = 0
		}
		how := fmt.Sprintf("after %s up", up)
		var err error
		if afterAck {
			// Armed once the server has been up a while, so that it has
			// recovered its runs; if no ack comes within up, the kill
			// comes anyway.
			if !pause(ctx, cfg.MinUp/2) {
				return k - 1, ctx.Err()
			}
			t := &killTrigger{delay: delay, fired: make(chan struct{})}
			d.trigger.Store(t)
			select {
			case <-t.fired:
			case <-time.After(up):
			case <-ctx.Done():
			}
			if d.trigger.CompareAndSwap(t, nil) {
				err = srv.kill() // no ack came
			} else {
				<-t.fired
				how = t.what
				if err = t.err; err == nil {
					err = srv.waitGone(10 * time.Second)
				}
			}
		} else if !pause(ctx, up) {
			return k - 1, ctx.Err()
		} else {
			err = srv.kill()
		}
		if err != nil {
			return k - 1, err
		}
		if ctx.Err() != nil {
			return k, ctx.Err()
		}
		cfg.logf("chaos: kill %d of server %d, %s", k, srv.generation(), how)
		if err := srv.start(ctx); err != nil {
			return k, err
		}
	}
	return cfg.Kills, nil
}

// doctor runs sandflow doctor on the stopped server's data directory and
// returns what it found: a store that does not verify clean, or a binary
// that cannot verify it, is a finding.
func doctor(ctx context.Context, srv *server) []Finding {
	out, errOut, code, err := srv.cli(ctx, "doctor")
	switch {
	case err != nil:
		return []Finding{{InvStoreVerifies, "", "running sandflow doctor: " + err.Error()}}
	case code != 0:
		return []Finding{{InvStoreVerifies, "", fmt.Sprintf("sandflow doctor exited %d: %s %s", code, truncate(out), truncate(errOut))}}
	}
	return nil
}

// exitNotFound is sandflow's exit code for an unknown run.
const exitNotFound = 5

// readRun reads a run's log back with sandflow runs show.
func readRun(ctx context.Context, srv *server, id string) *RunLog {
	l := &RunLog{ID: id}
	out, errOut, code, err := srv.cli(ctx, "--json", "runs", "show", id)
	switch {
	case err != nil:
		l.Err = err
	case code == exitNotFound:
		l.NotFound = true
	case code != 0:
		l.Err = fmt.Errorf("sandflow runs show exited %d: %s", code, truncate(errOut))
	default:
		if l.Status, l.Events, err = decodeRunShow(out); err != nil {
			l.Err = fmt.Errorf("sandflow runs show printed %q: %v", truncate(out), err)
		}
	}
	return l
}
