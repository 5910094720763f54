package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/internal/guestbuild"
)

// The README's HTTP walkthrough runs as written, and shows what it says.
// It needs bash, curl and jq: without them it skips, saying which is
// missing, except under SANDFLOW_CI=1 (.ci/run), where a skip would hide a
// broken set-up.
func TestREADMEWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("SANDFLOW_CI") == "1" {
				t.Fatalf("the walkthrough needs %s (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("the walkthrough needs %s, which is not installed (%v); SANDFLOW_CI=1 makes this a failure", tool, err)
		}
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- walkthrough begin -->\n```sh\n")
	script, _, ok2 := strings.Cut(rest, "```\n<!-- walkthrough end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no walkthrough block")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		`{"name":"deploy","version":1}`,
		"\norder\n",
		`{"status":"completed","result":{"deployed":true,`,
		"event: ask_opened\n",
		"event: run_completed\n",
		`"kind":"hook","position":2,"token":"order-42"`,
		`{"currency":"EUR","orderId":"42","paid":19.9}`,
		"\n202\n",
		`https://cdn.example/p1.mp4`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, out)
		}
	}
}

// The README's CLI quick start works as written in a clean clone of the
// repository: the commands are the README's, in its order, with the run
// and question ids the earlier commands printed put in for run_... and
// ask_..., and serve started, seen serving, and stopped. The clone holds
// what is committed (a change not yet committed is not in it).
func TestREADMEQuickStartFromACleanClone(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("SANDFLOW_CI") == "1" {
			t.Fatalf("the quick start test clones the repository with git: %v", err)
		}
		t.Skipf("the quick start test needs git to clone the repository (%v); SANDFLOW_CI=1 makes this a failure", err)
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		if os.Getenv("SANDFLOW_CI") == "1" {
			t.Fatalf("the repository root is not a git checkout: %v", err)
		}
		t.Skipf("the repository root is not a git checkout to clone (%v)", err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- quickstart begin -->\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "```\n<!-- quickstart end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no quick start block")
	}
	clone := filepath.Join(t.TempDir(), "sandflow")
	if out, err := exec.Command("git", "clone", "--quiet", "--no-hardlinks", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sh := func(line string) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "SANDFLOW_DATA=", "SANDFLOW_ENGINE=")
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	runID := regexp.MustCompile(`\brun (run_[0-9a-zA-Z_]+)`)
	askID := regexp.MustCompile(`\bquestion (ask_[0-9a-zA-Z_]+)`)
	var run, ask string
	var ran []string
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.ReplaceAll(line, "run_...", run)
		line = strings.ReplaceAll(line, "ask_...", ask)
		ran = append(ran, line)
		if line == "./sandflow serve" {
			serveOnce(t, ctx, clone)
			continue
		}
		out, err := sh(line)
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		switch {
		case strings.Contains(line, " call deploy"):
			if !strings.Contains(out, "status: waiting") || !strings.Contains(out, "| Deploy api?") {
				t.Errorf("%s printed:\n%s", line, out)
			}
			if m := runID.FindStringSubmatch(out); m != nil {
				run = m[1]
			}
			if m := askID.FindStringSubmatch(out); m != nil {
				ask = m[1]
			}
			if run == "" || ask == "" {
				t.Fatalf("%s printed no run or question id:\n%s", line, out)
			}
		case strings.Contains(line, " asks answer "):
			if !strings.Contains(out, "status: completed") || !strings.Contains(out, `"deployed":true`) {
				t.Errorf("%s printed:\n%s", line, out)
			}
		case strings.Contains(line, " asks show "):
			if !strings.Contains(out, "build api → push image → roll out 3 replicas") || !strings.Contains(out, "approve") {
				t.Errorf("%s printed:\n%s", line, out)
			}
		case strings.Contains(line, " runs show "):
			if !strings.Contains(out, "timeline:") || !strings.Contains(out, "run_completed") && !strings.Contains(out, "completed") {
				t.Errorf("%s printed:\n%s", line, out)
			}
		}
	}
	if len(ran) < 10 || run == "" {
		t.Fatalf("the quick start ran %d commands: %q", len(ran), ran)
	}
	if _, err := os.Stat(filepath.Join(clone, "run.history.zst")); err != nil {
		t.Errorf("runs export wrote no file: %v", err)
	}
}

// serveOnce starts ./sandflow serve in dir on a free port, waits for it to
// say it serves, and stops it with SIGTERM, which must end it cleanly.
func serveOnce(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "./sandflow", "serve", "--addr", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDFLOW_DATA=", "SANDFLOW_ENGINE=")
	serr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, serr, "serving", time.Minute)
	cmd.Process.Signal(syscall.SIGTERM)
	go io.Copy(io.Discard, serr)
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
}
