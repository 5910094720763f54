package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
