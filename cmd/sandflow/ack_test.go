package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

const testAPIToken = "sfa_test-token-0123456789"

// startServe starts `sandflow serve` on a free port and returns it with
// the address it listens on.
func startServe(t *testing.T, c *cli, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	args := append(append([]string{"--data", c.data}, c.pre...), "serve", "--addr", "127.0.0.1:0", "--api-token", testAPIToken)
	serve := exec.Command(bin, append(args, extra...)...)
	serr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(serr)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "msg=serving") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addr <- a
					}
				}
				break
			}
		}
		io.Copy(io.Discard, serr)
	}()
	select {
	case a := <-addr:
		return serve, a
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start within 30s")
		return nil, ""
	}
}

// Regression: an answer given with wait=0 was acknowledged (202) before it
// was committed, and a kill a second later lost it. Here the process is
// killed (SIGKILL, no goodbye) straight after the 2xx, and restarted: the
// answer is there, and the run finishes with it.
func TestCLIAnswerSurvivesKillAfterAck(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, c.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
		t.Fatalf("call: %+v", ri)
	}
	askID := ri.Waiting[0].AskID

	serve, addr := startServe(t, c)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/asks/"+askID+"/answer?wait=0", strings.NewReader(`{"optionId":"approve"}`))
	req.Header.Set("Authorization", "Bearer "+testAPIToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	serve.Process.Signal(syscall.SIGKILL)
	serve.Wait()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("answer: %d", resp.StatusCode)
	}

	// Restarted, the server recovers the run and finishes it.
	serve, addr = startServe(t, c)
	status := store.RunStatus("")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !status.Terminal(); time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/runs/"+ri.ID, nil)
		req.Header.Set("Authorization", "Bearer "+testAPIToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Run host.RunInfo }
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		status = got.Run.Status
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Errorf("serve did not stop cleanly: %v", err)
	}
	if status != store.StatusCompleted {
		t.Errorf("after the restart the run is %q, want completed", status)
	}
	s := decode[shown](t, c.ok("runs", "show", ri.ID, "--json"))
	settled := false
	for _, e := range s.Events {
		if e.Kind == host.EvAskSettled && strings.Contains(string(e.Data), `"approve"`) {
			settled = true
		}
	}
	if !settled {
		t.Fatalf("after the kill the answer is gone: run %s, %d events", s.Run.Status, len(s.Events))
	}
}
