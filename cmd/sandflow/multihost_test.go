package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// Three `sandflow serve` processes on one PostgreSQL database. A run's
// step is fetching from a server of the test's that does not answer; the
// process executing it is killed (SIGKILL); once its lease expires one of
// the others claims the run, records the attempt cut off, runs the step
// again (answered this time) and completes the run.
func TestCLIThreeServesOneKilledMidStep(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("finding which process executes the step reads /proc")
	}
	dsn := pgtest.Schema(t)
	var mu sync.Mutex
	var fetchers []string // the client address of each fetch
	entered := make(chan string, 4)
	hold := make(chan struct{})
	defer close(hold)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetchers = append(fetchers, r.RemoteAddr)
		first := len(fetchers) == 1
		mu.Unlock()
		if first {
			entered <- r.RemoteAddr
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "fetched")
	}))
	defer ts.Close()

	// The kitchen guest, allowed to fetch from the test's server.
	root := t.TempDir()
	m := filepath.Join(root, "manifest.json")
	os.WriteFile(m, []byte(`{"name":"kitchen","entry":"execute","inputSchema":{"type":"object","properties":{"mode":{"type":"string"},"text":{"type":"string"}},"required":["mode"]},"capabilities":["http.fetch"],"httpAllow":["127.0.0.1"]}`), 0o600)
	admin := newCLI(t)
	admin.pre = []string{"--store", dsn}
	repoRoot, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := guestbuild.Build(filepath.Join(repoRoot, "host/testdata/guests/kitchen"))
	if err != nil {
		t.Fatal(err)
	}
	admin.ok("plugin", "add", wasm, "--manifest", m)

	serves := make([]*exec.Cmd, 3)
	addrs := make([]string, 3)
	for i := range serves {
		c := newCLI(t)
		c.pre = []string{"--store", dsn}
		serves[i], addrs[i] = startServe(t, c)
	}
	req, _ := http.NewRequest("POST", "http://"+addrs[0]+"/v1/tools/kitchen/calls?wait=0", strings.NewReader(fmt.Sprintf(`{"mode":"fetch-retry","text":%q}`, ts.URL)))
	req.Header.Set("Authorization", "Bearer "+testAPIToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var started struct{ Run host.RunInfo }
	json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if started.Run.ID == "" {
		t.Fatalf("call: %d", resp.StatusCode)
	}
	var from string
	select {
	case from = <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no host began the step")
	}
	killed := -1
	for i, s := range serves {
		if ownsConn(t, s.Process.Pid, from) {
			killed = i
		}
	}
	if killed < 0 {
		t.Fatalf("no serve process owns the connection from %s", from)
	}
	serves[killed].Process.Signal(syscall.SIGKILL)
	serves[killed].Wait()
	other := addrs[(killed+1)%3]
	var ri host.RunInfo
	for deadline := time.Now().Add(60 * time.Second); !ri.Status.Terminal(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("run not ended 60 s after the kill: %+v", ri)
		}
		req, _ := http.NewRequest("GET", "http://"+other+"/v1/runs/"+started.Run.ID, nil)
		req.Header.Set("Authorization", "Bearer "+testAPIToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Run host.RunInfo }
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		ri = got.Run
	}
	if ri.Status != store.StatusCompleted || !strings.Contains(compact(t, ri.Result), `"body":"fetched"`) {
		t.Fatalf("run %s: %s %s", ri.ID, ri.Status, ri.Result)
	}
	s := decode[shown](t, admin.ok("runs", "show", ri.ID, "--json"))
	n := map[string]int{}
	for _, e := range s.Events {
		n[e.Kind]++
	}
	if n[host.EvStepStarted] != 2 || n[host.EvStepFailed] != 1 || n[host.EvRunCompleted] != 1 {
		t.Errorf("log %v: want the killed attempt recorded, a second, one completion", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range fetchers[1:] {
		if ownsConn(t, serves[killed].Process.Pid, f) {
			t.Errorf("the killed process fetched again")
		}
	}
	if len(fetchers) != 2 {
		t.Errorf("%d fetches, want 2 (one per recorded attempt)", len(fetchers))
	}
}

// ownsConn reports whether process pid has the TCP socket whose local
// address is addr (the client end of a connection to the test's server).
func ownsConn(t *testing.T, pid int, addr string) bool {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X ", p)
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1]+" ", want) {
				inode = fs[9]
			}
		}
	}
	if inode == "" {
		return false
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}
