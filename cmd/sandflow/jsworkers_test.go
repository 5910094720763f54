package main

import (
	"strings"
	"testing"
)

// serve --js-workers is a count of workers: a negative one is a usage
// error, named in the message, and serve does not start.
func TestServeJSWorkersMustNotBeNegative(t *testing.T) {
	c := newCLI(t)
	stderr := c.expect(exitUsage, "serve", "--addr", "", "--js-workers", "-1")
	if !strings.Contains(stderr, "--js-workers") {
		t.Fatalf("stderr %q does not name --js-workers", stderr)
	}
}

// The help says what the flag's default is.
func TestServeHelpNamesJSWorkers(t *testing.T) {
	out := newCLI(t).ok("serve", "--help")
	if !strings.Contains(out, "--js-workers") || !strings.Contains(out, "2 × CPUs") {
		t.Fatalf("serve --help does not describe --js-workers:\n%s", out)
	}
}
