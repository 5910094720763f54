package httpapi_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/store"
)

// surfaceServer serves next under api.Admit behind the API's own server
// settings, as `sandflow serve` mounts the MCP server.
func surfaceServer(t *testing.T, cfg httpapi.Config, next http.Handler) (*httpapi.Server, string) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(context.Background(), st, &host.Options{Engine: sharedEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	api, err := httpapi.New(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewHTTPServer(api)
	srv.Handler = api.Admit(next)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return api, "http://" + ln.Addr().String()
}

// A surface mounted beside the API (the MCP server) is admitted as the
// API's calls are: past a client's share 429 with Retry-After, a body over
// the limit 413 without reaching the handler, and once admitted its
// handler may outlast the server's read and write timeouts.
func TestAdmitBoundsAnotherSurface(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	reached := make(chan string, 8)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reached <- string(body)
		switch string(body) {
		case "hold":
			held <- struct{}{}
			<-release
		case "slow":
			select {
			case <-time.After(700 * time.Millisecond):
			case <-r.Context().Done():
				http.Error(w, "context ended", http.StatusInternalServerError)
				return
			}
		}
		io.WriteString(w, "ok:"+string(body))
	})
	_, url := surfaceServer(t, httpapi.Config{
		APITokens: []string{apiToken}, MaxBodyBytes: 1024, MaxCalls: 8, MaxClientCalls: 1,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
	}, next)
	post := func(body string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Post(url+"/mcp", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	done := make(chan int, 1)
	go func() { code, _, _ := post("hold"); done <- code }()
	<-held
	<-reached
	if code, body, hdr := post("second"); code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("a second request of a client at its share: %d %q, Retry-After %q; want 429 with Retry-After", code, body, hdr.Get("Retry-After"))
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the held request: %d", code)
	}

	if code, body, _ := post(strings.Repeat("x", 2048)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over MaxBodyBytes: %d %q; want 413", code, body)
	}
	select {
	case b := <-reached:
		t.Fatalf("the handler was reached with a body of %d bytes over the limit", len(b))
	default:
	}

	if code, body, _ := post("slow"); code != http.StatusOK || body != "ok:slow" {
		t.Fatalf("a handler that outlasts the read and write timeouts: %d %q; want 200 ok:slow", code, body)
	}
}
