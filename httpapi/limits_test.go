package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
)

// rawRequest writes head (and the first bytes of a body) on a fresh
// connection and returns the status line the server answers with, or ""
// when it gives none within d.
func rawRequest(t *testing.T, addr, head string, d time.Duration) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(d))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), c
}

// Regression: the webhook handler read up to 2 MiB of body before it
// looked at the token, so a client with no token could hold a connection
// by trickling a body. The token is checked first: the refusal comes with
// the body unsent.
func TestWebhookTokenCheckedBeforeTheBody(t *testing.T) {
	e := newEnv(t, nil, nil)
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	line, _ := rawRequest(t, addr, "POST /.well-known/workflow/v1/webhook/whk_nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\npartial", 3*time.Second)
	if !strings.HasPrefix(line, "HTTP/1.1 404") {
		t.Fatalf("a webhook request with no live token and its body unsent got %q, want a 404 at once", line)
	}
}

// boundedEnv serves the API through NewHTTPServer, as sandflow serve does.
func boundedEnv(t *testing.T, cfg httpapi.Config) (addr string) {
	t.Helper()
	return boundedEnvWith(t, nil, cfg)
}

func boundedEnvWith(t *testing.T, opts *host.Options, cfg httpapi.Config) (addr string) {
	t.Helper()
	e := newEnv(t, opts, nil)
	cfg.APITokens, cfg.AdminTokens = []string{apiToken}, []string{adminToken}
	api, err := httpapi.New(e.h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewHTTPServer(api)
	go srv.Serve(httpapi.LimitListener(ln, cfg.MaxCalls+8))
	t.Cleanup(func() { srv.Close(); api.Close(context.Background()) })
	return ln.Addr().String()
}

// closedWithin says whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// Regression: only ReadHeaderTimeout was set, so an idle keep-alive
// connection or a trickled body held a connection for minutes.
func TestConnectionsAreBounded(t *testing.T) {
	addr := boundedEnv(t, httpapi.Config{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, WriteTimeout: time.Second})
	t.Run("idle keep-alive", func(t *testing.T) {
		line, c := rawRequest(t, addr, "GET /v1/tools HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+apiToken+"\r\n\r\n", 3*time.Second)
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("got %q", line)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Error("an idle keep-alive connection was still open 3s after its response, with a 300ms idle timeout")
		}
	})
	t.Run("trickled body", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/tools/nothing/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+apiToken+"\r\nContent-Length: 1000\r\n\r\n")
		start := time.Now()
		closed := make(chan struct{})
		go func() { io.Copy(io.Discard, c); close(closed) }()
		for time.Since(start) < 3*time.Second {
			select {
			case <-closed:
				return
			case <-time.After(50 * time.Millisecond):
				c.Write([]byte("x"))
			}
		}
		t.Error("a body trickled a byte every 50ms held its connection for 3s, with a 300ms read timeout")
	})
	t.Run("a wait longer than the read timeout", func(t *testing.T) {
		// The read deadline would end the request's context mid-wait:
		// the handler moves it.
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/asks/ask_unknown/answer?wait=1s", strings.NewReader(`{"optionId":"x"}`))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("got %d", resp.StatusCode)
		}
	})
}

// blocking is a capability that holds each call until release is closed.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func (b *blocking) capability() host.Capability {
	return func(ctx context.Context, _ host.CapabilityCall) (json.RawMessage, error) {
		b.started <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`1`), nil
	}
}

// clientFrom is an HTTP client whose connections come from ip (a loopback
// address), so the server counts it as another client.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// Calls in flight are admitted up to a bound per client (429 past it) and
// for the server (503), each with Retry-After, and admitted again once
// they finish.
func TestAdmissionOfCalls(t *testing.T) {
	b := &blocking{started: make(chan struct{}, 8), release: make(chan struct{})}
	e := newEnv(t, &host.Options{Capabilities: map[string]host.Capability{"count": b.capability()}},
		&httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken}, MaxCalls: 2, MaxClientCalls: 1})
	if r := e.upload(adminToken, guestWasm(t, "host/testdata/guests/kitchen"), repoFile(t, "host/testdata/guests/kitchen/manifest.json")); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	call := func(c *http.Client) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/tools/kitchen/calls?wait=0", strings.NewReader(`{"mode":"count","token":"k"}`))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	a, other, third := clientFrom("127.0.0.1"), clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	if resp := call(a); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first call: %d", resp.StatusCode)
	}
	<-b.started
	if resp := call(a); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second call of the same client: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := call(other); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("another client's call: %d", resp.StatusCode)
	}
	<-b.started
	if resp := call(third); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third client's call with the server full: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(b.release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := call(a)
		if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the calls finished, a new call still gets %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Regression: the manifest's 2 MiB cap held for a file part only; as a
// form field it was not checked.
func TestManifestCapOnEveryPath(t *testing.T) {
	e := newEnv(t, nil, nil)
	big := `{"name":"deploy","entry":"execute","inputSchema":{"type":"object"},"description":"` + strings.Repeat("x", 3<<20) + `"}`
	wasm := guestWasm(t, "examples/deploy")
	for _, asFile := range []bool{false, true} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("module", "tool.wasm")
		fw.Write(wasm)
		if asFile {
			fw, _ = mw.CreateFormFile("manifest", "manifest.json")
			fw.Write([]byte(big))
		} else {
			mw.WriteField("manifest", big)
		}
		mw.Close()
		r := e.do("POST", "/v1/plugins", adminToken, &buf, mw.FormDataContentType())
		if r.status != http.StatusRequestEntityTooLarge || r.code(t) != "too_large" || !strings.Contains(string(r.body), "manifest") {
			t.Errorf("a 3 MiB manifest (file part %v): %d %.200s", asFile, r.status, r.body)
		}
	}
}

// Errors name the field and quote at most 64 bytes of the input.
func TestErrorsQuoteABoundedExcerpt(t *testing.T) {
	e := newEnv(t, nil, nil)
	long := strings.Repeat("9", 10_000) + "x"
	for _, path := range []string{"/v1/runs?limit=" + long, "/v1/runs?status=" + long, "/v1/asks/a/answer?wait=" + long,
		"/v1/tools/" + long + "/calls", "/v1/hooks/" + long} {
		method := "GET"
		if strings.Contains(path, "answer") || strings.Contains(path, "calls") || strings.Contains(path, "hooks") {
			method = "POST"
		}
		r := e.do(method, path, apiToken, strings.NewReader(`{}`), "application/json")
		var body struct {
			Error struct{ Code, Message string }
		}
		r.json(t, &body)
		if (r.status != http.StatusBadRequest && r.status != http.StatusNotFound) || len(body.Error.Message) > 200 || !strings.Contains(body.Error.Message, "10001 bytes") {
			t.Errorf("%s: %d, message of %d bytes: %.120q", path[:20], r.status, len(body.Error.Message), body.Error.Message)
		}
	}
	// The scheme of the bearer token is case-insensitive.
	if r := e.do("GET", "/v1/tools", "", nil, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("no token: %d", r.status)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/tools", nil)
	req.Header.Set("Authorization", "bearer "+apiToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a lowercase bearer scheme: %d", resp.StatusCode)
	}
}

// Request bytes in flight are admitted like calls: a body being sent
// holds its length until the request ends.
func TestAdmissionOfBodyBytes(t *testing.T) {
	e := newEnv(t, nil, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken},
		MaxUploadBytes: 1, MaxBodyBytes: 4 << 20, MaxClientBodyInFlight: 5 << 20, MaxBodyInFlight: 5 << 20})
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	head := "POST /v1/tools/nothing/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiToken + "\r\nContent-Length: 4194304\r\n\r\n"
	// The first holds 4 MiB while its body does not come.
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	io.WriteString(first, head+"{")
	time.Sleep(200 * time.Millisecond) // let the server take it
	line, _ := rawRequest(t, addr, head, 3*time.Second)
	if !strings.HasPrefix(line, "HTTP/1.1 429") {
		t.Errorf("a second 4 MiB body of the same client: %q, want 429", line)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, head)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("another client's 4 MiB body with the server full: %d, Retry-After %q; want 503 with it", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// LimitListener holds a connection past the limit until one closes, and
// closing it ends a waiting Accept: a server's Shutdown does not hang.
func TestLimitListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(httpapi.LimitListener(ln, 1)) }()
	get := func(c net.Conn, d time.Duration) error {
		c.SetReadDeadline(time.Now().Add(d))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		return c
	}
	first := dial()
	if err := get(first, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	// first stays open (keep-alive): a second connection is not served.
	second := dial()
	if err := get(second, 300*time.Millisecond); err == nil {
		t.Fatal("a second connection past the limit of 1 was served")
	}
	first.Close()
	if err := get(second, 3*time.Second); err != nil {
		t.Fatalf("the second connection, after the first closed: %v", err)
	}
	dial() // waits: the second holds the one place
	// Serve waits in Accept for a place; the shutdown ends the wait.
	// (http.Server.Shutdown waits for its listeners' Accept without
	// looking at its context: a wait that never ended hung it.)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown with an Accept waiting: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return: Accept still waits for a place")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

// slowCompile is the shared engine with a compile that takes d more.
type slowCompile struct {
	host.Engine
	d time.Duration
}

func (e slowCompile) Compile(ctx context.Context, wasm []byte) (host.CompiledModule, error) {
	time.Sleep(e.d)
	return e.Engine.Compile(ctx, wasm)
}

// An upload whose compile outlasts the write timeout still gets its
// answer: the handler moves its deadline by the compile timeout once the
// body is in.
func TestUploadOutlastsTheWriteTimeout(t *testing.T) {
	addr := boundedEnvWith(t, &host.Options{Engine: slowCompile{sharedEngine(t), time.Second}},
		httpapi.Config{WriteTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("module", "tool.wasm")
	fw.Write(guestWasm(t, "examples/deploy"))
	fw, _ = mw.CreateFormFile("manifest", "manifest.json")
	fw.Write(repoFile(t, "examples/deploy/manifest.json"))
	mw.Close()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/plugins", &buf)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("an upload compiling for 1s with a 300ms write timeout: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
}
