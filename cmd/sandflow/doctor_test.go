package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// The commands that only read leave the store file as it was, bytes and
// mtime (runs list used to rewrite it); doctor finds a clean directory
// clean.
func TestCLIReadOnlyCommandsLeaveTheFile(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, c.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	db := filepath.Join(c.data, "sandflow.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(db)
	time.Sleep(20 * time.Millisecond)
	for _, args := range [][]string{
		{"runs", "list"}, {"runs", "show", ri.ID}, {"runs", "export", ri.ID, "-o", filepath.Join(t.TempDir(), "h.zst")},
		{"replay", ri.ID}, {"plugin", "list"}, {"tools"}, {"asks", "list"}, {"doctor"},
	} {
		c.ok(args...)
		after, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		fa, _ := os.Stat(db)
		if !bytes.Equal(before, after) || !fa.ModTime().Equal(fi.ModTime()) {
			t.Fatalf("sandflow %s changed the store file (mtime %v -> %v)", strings.Join(args, " "), fi.ModTime(), fa.ModTime())
		}
	}
	var rep struct {
		OK    bool          `json:"ok"`
		Store *store.Report `json:"store"`
	}
	if err := json.Unmarshal([]byte(c.ok("doctor", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Store == nil || rep.Store.Runs != 1 || rep.Store.Pages == 0 {
		t.Fatalf("doctor --json of a clean directory: %+v", rep)
	}
}

// A changed byte in a run's input is reported by every command that reads
// it (exit 9), and doctor names where it is, and changes nothing; show,
// export and replay used to pass with the altered input.
func TestCLIDamagedInputDetected(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, c.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	db := filepath.Join(c.data, "sandflow.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte(`"service":"api"`)
	n := 0
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b, needle) {
		b[i+len(`"service":"`)] = 'x' // "api" -> "xpi", wherever it is
		n++
	}
	if n == 0 {
		t.Fatal("the input is not in the file")
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"runs", "show", ri.ID}, {"runs", "export", ri.ID, "-o", filepath.Join(t.TempDir(), "h.zst")}, {"replay", ri.ID}} {
		if errs := c.expect(exitDamaged, args...); !strings.Contains(errs, "corrupt") {
			t.Errorf("sandflow %s: %s", strings.Join(args, " "), errs)
		}
	}
	out, _, code := c.run("doctor")
	if code != exitDamaged || !strings.Contains(out, "DAMAGED") || !strings.Contains(out, "events") || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	var rep struct {
		OK    bool          `json:"ok"`
		Store *store.Report `json:"store"`
	}
	out, _, code = c.run("doctor", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if code != exitDamaged || rep.OK || len(rep.Store.Findings) == 0 {
		t.Fatalf("doctor --json: %+v", rep)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(after, b) {
		t.Fatal("doctor or a refused read changed the file")
	}
}

// An empty store file is refused, not taken for an empty store.
func TestCLIEmptyStoreFileRefused(t *testing.T) {
	c := newCLI(t)
	if err := os.WriteFile(filepath.Join(c.data, "sandflow.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := c.expect(exitDamaged, "runs", "list"); !strings.Contains(errs, "empty") {
		t.Errorf("runs list: %s", errs)
	}
	c.expect(exitDamaged, "doctor")
}
