package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The 2025-11-25 revision puts tasks in fields the SDK's types do not
// have: a tools/call's params.task (the client wants a task) and an
// initialize's params.capabilities.tasks (the client can poll tasks).
// The SDK drops unknown fields when it decodes, so before it does, lift
// moves them where its types keep them: params._meta[taskMeta] and
// capabilities.experimental[taskMeta]. See RATIONALE.md, "Why are MCP
// tasks lifted into _meta before the SDK decodes a request?".
const taskMeta = "io.sandflow/task"

// lift rewrites one JSON-RPC request's params; it returns params
// unchanged when there is nothing to lift.
func lift(method string, params json.RawMessage) json.RawMessage {
	if !bytes.Contains(params, []byte(`"task`)) {
		return params
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return params
	}
	switch method {
	case "tools/call":
		task, ok := p["task"]
		if !ok {
			return params
		}
		meta := map[string]json.RawMessage{}
		if m, ok := p["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
			return params
		}
		meta[taskMeta] = task
		p["_meta"], _ = json.Marshal(meta)
		delete(p, "task")
	case "initialize":
		var caps map[string]json.RawMessage
		if json.Unmarshal(p["capabilities"], &caps) != nil || caps["tasks"] == nil {
			return params
		}
		exp := map[string]json.RawMessage{}
		if e, ok := caps["experimental"]; ok && json.Unmarshal(e, &exp) != nil {
			return params
		}
		exp[taskMeta] = caps["tasks"]
		caps["experimental"], _ = json.Marshal(exp)
		p["capabilities"], _ = json.Marshal(caps)
	default:
		return params
	}
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}

// liftHTTP lifts the request in an HTTP body, bounded by limit, and
// returns the body as the SDK will read it.
func liftHTTP(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	r.Body.Close()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("request body exceeds %d bytes", mbe.Limit)
		}
		return nil, err
	}
	if bytes.Contains(body, []byte(`"task`)) {
		var req struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id,omitempty"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params,omitempty"`
		}
		if json.Unmarshal(body, &req) == nil && req.Method != "" {
			if p := lift(req.Method, req.Params); !bytes.Equal(p, req.Params) {
				req.Params = p
				body, _ = json.Marshal(req)
			}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, nil
}

// liftTransport lifts the requests a stdio client sends, and serves its
// listens for tasks (listen.go); conn is its connection once connected,
// where pushes are written.
type liftTransport struct {
	s    *Server
	t    sdk.Transport
	conn sdk.Connection
}

func (l *liftTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := l.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	l.conn = c
	return &liftConn{Connection: c, s: l.s}, nil
}

type liftConn struct {
	sdk.Connection
	s       *Server
	listens stdioListens
}

func (c *liftConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			c.listens.end("") // the client is gone
			return m, err
		}
		req, ok := m.(*jsonrpc.Request)
		if !ok {
			return m, nil
		}
		if c.s.stdioListen(c, req) {
			continue
		}
		req.Params = lift(req.Method, req.Params)
		return m, nil
	}
}
