package main

import (
	"strings"
	"testing"
)

func TestCLIUnknownEngine(t *testing.T) {
	c := newCLI(t)
	_, errs, code := c.run("--engine", "v8", "tools")
	if code != exitUsage || !strings.Contains(errs, `unknown engine "v8"`) {
		t.Errorf("exit %d: %s", code, errs)
	}
}
