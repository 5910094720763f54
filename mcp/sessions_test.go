package mcp_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/sandflow/sandflow/mcp"
)

// status is the HTTP status of a request in a 2025-11-25 session.
func (r *raw) status(method string) int {
	r.t.Helper()
	req, _ := http.NewRequest("POST", r.url, bytes.NewReader([]byte(`{"jsonrpc":"2.0","id":99,"method":"`+method+`","params":{}}`)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", r.session)
	req.Header.Set("Mcp-Protocol-Version", r.version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Past MaxSessions, a new 2025-11-25 session closes the one idle the
// longest: its client is answered 404 (and would start anew), while the
// others go on.
func TestSessionsBoundedByEvictingTheIdleLongest(t *testing.T) {
	e := newEnv(t, &mcp.Options{MaxSessions: 2})
	open := func() *raw {
		r := &raw{t: t, url: e.hs.URL}
		r.call("initialize", map[string]any{"protocolVersion": mcp.Version20251125, "clientInfo": map[string]any{"name": "raw", "version": "1"},
			"capabilities": map[string]any{}})
		r.version = mcp.Version20251125
		r.notify("notifications/initialized")
		return r
	}
	a, b := open(), open()
	if a.status("tools/list") != http.StatusOK { // a is now the more recent
		t.Fatal("a's session")
	}
	c := open()
	if got := b.status("tools/list"); got != http.StatusNotFound {
		t.Errorf("the idle-longest session: HTTP %d, want 404", got)
	}
	for name, r := range map[string]*raw{"a": a, "c": c} {
		if got := r.status("tools/list"); got != http.StatusOK {
			t.Errorf("session %s: HTTP %d", name, got)
		}
	}
}
