package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// A --store that does not parse is a usage error, one nobody answers at is
// exit 10, from the flag and from SANDFLOW_STORE alike; neither creates the
// data directory.
func TestCLIStoreURLRefused(t *testing.T) {
	data := filepath.Join(t.TempDir(), "never")
	for _, tc := range []struct {
		args []string
		env  string
		code int
		says string
	}{
		{[]string{"--store", "mysql://u@h/db", "serve", "--addr", "127.0.0.1:0"}, "", exitUsage, "bad connection string"},
		{[]string{"--store", "postgres://u@h:port/db", "runs", "list"}, "", exitUsage, "bad connection string"},
		{[]string{"--store", "postgres://nobody@127.0.0.1:1/none", "serve", "--addr", "127.0.0.1:0"}, "", exitUnreachable, "unreachable"},
		{[]string{"runs", "list"}, "postgres://nobody@127.0.0.1:1/none", exitUnreachable, "unreachable"},
		{[]string{"--json", "runs", "list"}, "postgres://nobody@127.0.0.1:1/none", exitUnreachable, `"code":"unreachable"`},
	} {
		cmd := exec.Command(bin, append([]string{"--data", data}, tc.args...)...)
		cmd.Env = append(os.Environ(), "SANDFLOW_STORE="+tc.env)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.says) {
			t.Errorf("sandflow %v (SANDFLOW_STORE=%q): exit %d, want %d saying %q\n%s", tc.args, tc.env, code, tc.code, tc.says, out)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("sandflow %v made the data directory: %v", tc.args, err)
		}
	}
}

// Two processes on one PostgreSQL store: a call made by one is answered
// by the other and completes, each with a data directory of its own.
func TestCLIPostgresStore(t *testing.T) {
	dsn := pgtest.Schema(t)
	a, b := newCLI(t), newCLI(t)
	a.pre, b.pre = []string{"--store", dsn}, []string{"--store", dsn}
	a.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, a.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
		t.Fatalf("call: %+v", ri)
	}
	done := decode[host.RunInfo](t, b.ok("asks", "answer", ri.Waiting[0].AskID, "approve", "--json"))
	if done.Status != store.StatusCompleted || !strings.Contains(compact(t, done.Result), `"deployed":true`) {
		t.Fatalf("answer: %+v", done)
	}
	s := decode[shown](t, a.ok("runs", "show", ri.ID, "--json"))
	if n := outputCount(s.Events, "planned deploy of api"); n != 1 {
		t.Errorf("plan step ran %d times across the processes, want 1", n)
	}
	a.expect(exitUsage, "doctor")
}
