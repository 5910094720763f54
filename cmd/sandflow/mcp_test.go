package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const echoTool = `defineWorkflowTool({
  description: "Echoes its input.",
  inputSchema: {type: "object", properties: {msg: {type: "string"}}},
  async execute(input) { "use workflow"; return input; },
});`

// mcpEcho connects an MCP client to a sandflow mcp process, lists its
// tools and calls echo.
func mcpEcho(t *testing.T, cmd *exec.Cmd, era string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
		t.Fatalf("tools: %v %+v", err, tools)
	}
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r.StructuredContent)
	if r.IsError || string(b) != `{"msg":"hi"}` {
		t.Fatalf("echo: %s %+v", b, r)
	}
}

// sandflow mcp serves the data directory on stdio, in both eras.
func TestCLIMCPStdio(t *testing.T) {
	c := newCLI(t)
	js := filepath.Join(t.TempDir(), "echo.js")
	if err := os.WriteFile(js, []byte(echoTool), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("plugin", "add", js)
	for _, era := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(era, func(t *testing.T) {
			mcpEcho(t, exec.Command(bin, "--data", c.data, "mcp"), era)
		})
	}
}

// With sandflow serve running on the data directory, sandflow mcp talks
// to its /mcp, at --url or at the URL serve keeps in serve.json, with the
// token from tokens.json.
func TestCLIMCPThroughARunningServer(t *testing.T) {
	c := newCLI(t)
	js := filepath.Join(t.TempDir(), "echo.js")
	if err := os.WriteFile(js, []byte(echoTool), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("plugin", "add", js)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", addr)
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, serr, "serving", 30*time.Second)
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}()
	for _, era := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(era, func(t *testing.T) {
			mcpEcho(t, exec.Command(bin, "--data", c.data, "mcp", "--url", "http://"+addr+"/mcp"), era)
		})
		// Without --url it finds the server (on a port of its own here)
		// through serve.json.
		t.Run(era+"/found", func(t *testing.T) {
			mcpEcho(t, exec.Command(bin, "--data", c.data, "mcp"), era)
		})
	}
}
