package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// A step in flight when its process is killed (SIGKILL, no goodbye) is in
// the log as an interrupted attempt once `serve` recovers the run: with
// maxAttempts 1 (the kitchen's fetch step), the step fails with a
// StepInterruptedError of cause "crashed" and the side effect ran once.
// Before, the recovered run ran the step again as the same attempt 1.
func TestCLIStepKilledMidAttemptIsRecordedInterrupted(t *testing.T) {
	var requests atomic.Int32
	hold := make(chan struct{})
	defer close(hold)
	entered := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		entered <- struct{}{}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()

	c := newCLI(t)
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "host/testdata/guests/kitchen")
	wasm, err := guestbuild.Build(src)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	raw, err := os.ReadFile(filepath.Join(src, "manifest.json"))
	if err != nil || json.Unmarshal(raw, &m) != nil {
		t.Fatalf("manifest: %v", err)
	}
	m["capabilities"] = []string{"count", abi.CapabilityFetch}
	m["httpAllow"] = []string{"127.0.0.1"}
	mpath := filepath.Join(t.TempDir(), "manifest.json")
	b, _ := json.Marshal(m)
	if err := os.WriteFile(mpath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("plugin", "add", wasm, "--manifest", mpath)

	input, _ := json.Marshal(map[string]string{"mode": "fetch", "text": srv.URL + "/deploy"})
	call := exec.Command(bin, "--data", c.data, "call", "kitchen", "--input", string(input), "--run-id", "killed-1")
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		call.Process.Kill()
		t.Fatal("the step never fetched")
	}
	call.Process.Signal(syscall.SIGKILL) // mid-step
	call.Wait()

	const token = "test-token-0123456789"
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0", "--api-token", token)
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`addr=(\S+)`)
		sc := bufio.NewScanner(serr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not say where it serves")
	}
	var ri host.RunInfo
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, _ := http.NewRequest("GET", base+"/v1/runs/killed-1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var body struct{ Run host.RunInfo }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			ri = body.Run
		}
		if err == nil && ri.Status.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run not ended after recovery: %+v %v", ri, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Errorf("serve did not stop cleanly: %v", err)
	}
	if ri.Status != store.StatusFailed || !errors.Is(ri.Err(), host.ErrStepInterrupted) {
		t.Fatalf("run %+v, want failed with a StepInterruptedError", ri)
	}
	s := decode[shown](t, c.ok("runs", "show", "killed-1", "--json"))
	var failed []*host.StepInterruptedError
	for _, e := range s.Events {
		if e.Kind != host.EvStepFailed {
			continue
		}
		var d struct{ Error *abi.ErrorObject }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if ie, ok := host.AsStepInterrupted(d.Error, "fetch"); ok {
			failed = append(failed, ie)
		}
	}
	if len(failed) != 1 || failed[0].Cause != abi.InterruptCrashed || failed[0].Attempt != 1 {
		t.Fatalf("interruptions in the log: %+v, want attempt 1 crashed", failed)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the side effect ran %d times, want 1 (maxAttempts 1)", n)
	}
}
