package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// errNoServer is returned when no running server can answer for the data
// directory (none runs, or no token for the request is known).
var errNoServer = errors.New("no running sandflow serve with a known API token")

// remote is the HTTP API of the sandflow serve that holds a data
// directory: while serve runs, the CLI's commands go through it.
type remote struct {
	url, token string
	dir        string
}

// remoteTimeout bounds one request to the server; a call's own wait is
// added to it.
const remoteTimeout = 30 * time.Second

// maxRemoteAnswer bounds what the CLI reads of one answer: a history file
// of the largest run the host allows (zstd-compressed) fits.
const maxRemoteAnswer = 600 << 20

// server finds the running sandflow serve of the data directory and the
// token to use with it: SANDFLOW_API_TOKEN (SANDFLOW_ADMIN_TOKEN when admin
// is set), else the directory's tokens.json.
func (a *app) server(admin bool) (remote, error) {
	si, ok := runningServer(a.dataDir)
	if !ok || !confirmServer(si) {
		return remote{}, errNoServer
	}
	env := "SANDFLOW_API_TOKEN"
	if admin {
		env = "SANDFLOW_ADMIN_TOKEN"
	}
	token := os.Getenv(env)
	if token == "" {
		var t tokens
		if b, err := os.ReadFile(filepath.Join(a.dataDir, tokensFile)); err == nil && json.Unmarshal(b, &t) == nil {
			token = t.API
			if admin {
				token = t.Admin
			}
		}
	}
	if token == "" {
		return remote{}, errNoServer
	}
	return remote{url: si.URL, token: token, dir: a.dataDir}, nil
}

// do sends one request and decodes a JSON answer into out (when out is
// not nil); the answer's bytes are returned either way. An error answer
// becomes an error with the exit code its API code maps to.
func (r remote) do(ctx context.Context, method, path, contentType string, body []byte, wait time.Duration, out any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout+wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the API of sandflow serve at %s: %w", r.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("the API of sandflow serve at %s: %w", r.url, err)
	}
	if len(b) > maxRemoteAnswer {
		return nil, fmt.Errorf("%s %s: the answer is over %d bytes, more than this CLI reads", method, path, maxRemoteAnswer)
	}
	if resp.StatusCode/100 != 2 {
		return nil, apiFailure(method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: the answer is not what this CLI expects: %w", method, path, err)
		}
	}
	return b, nil
}

// apiFailure turns an error answer into an error carrying the exit code of
// its API error code, so a command exits the same way through the server
// as on the data directory.
func apiFailure(method, path, status string, body []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	msg := e.Error.Message
	if msg == "" {
		msg = string(bytes.TrimSpace(body))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
	}
	err := fmt.Errorf("%s %s: %s: %s", method, path, status, msg)
	code := exitError
	switch e.Error.Code {
	case "not_found":
		code = exitNotFound
	case "bad_request", "invalid_input", "bad_manifest", "limit", "too_large":
		code = exitInvalid
	case "conflict":
		code = exitConflict
	case "non_determinism":
		code = exitNonDeterminism
	case "store_corrupt":
		code = exitDamaged
	case "unauthorized":
		err = fmt.Errorf("%w (the token is SANDFLOW_API_TOKEN or SANDFLOW_ADMIN_TOKEN, else the data directory's %s)", err, tokensFile)
	default:
		if len(e.Error.Code) > len("plugin_") && e.Error.Code[:len("plugin_")] == "plugin_" {
			code = exitInvalid
		}
	}
	return withCode(code, err)
}

// remoteGet reads path from the running server's API and decodes its JSON
// answer into out.
func (a *app) remoteGet(ctx context.Context, path string, out any) error {
	r, err := a.server(false)
	if err != nil {
		return err
	}
	if _, err := r.do(ctx, http.MethodGet, path, "", nil, 0, out); err != nil {
		return err
	}
	a.throughServer(r)
	return nil
}

// throughServer tells the user (on stderr) that the command went through
// the running server, not the data directory.
func (a *app) throughServer(r remote) {
	fmt.Fprintf(a.errOut, "(through the API of sandflow serve at %s, which holds %s)\n", r.url, r.dir)
}

// readOrRemote runs a read-only command on the data directory, or, when a
// running sandflow serve holds it, through that server's API.
func (a *app) readOrRemote(ctx context.Context, local func(h *host.Host) error, remote func() error) error {
	return a.localOrRemote(ctx, true, local, remote)
}

// writeOrRemote runs a command that writes on the data directory, or,
// when a running sandflow serve holds it, through that server's API,
// which commits before it answers.
func (a *app) writeOrRemote(ctx context.Context, local func(h *host.Host) error, remote func() error) error {
	return a.localOrRemote(ctx, false, local, remote)
}

func (a *app) localOrRemote(ctx context.Context, readOnly bool, local func(h *host.Host) error, remote func() error) error {
	err := a.withHostMode(ctx, readOnly, local)
	if !errors.Is(err, store.ErrLocked) {
		return err
	}
	if rerr := remote(); !errors.Is(rerr, errNoServer) {
		return rerr
	}
	return err
}

// remoteRun sends a request that answers {"run": RunInfo} and returns
// the run.
func (a *app) remoteRun(ctx context.Context, method, path string, body any, wait time.Duration) (host.RunInfo, error) {
	r, err := a.server(false)
	if err != nil {
		return host.RunInfo{}, err
	}
	var b []byte
	ct := ""
	switch v := body.(type) {
	case nil:
	case json.RawMessage:
		b, ct = v, "application/json"
	default:
		if b, err = json.Marshal(v); err != nil {
			return host.RunInfo{}, err
		}
		ct = "application/json"
	}
	var out struct {
		Run host.RunInfo `json:"run"`
	}
	if _, err := r.do(ctx, method, path, ct, b, wait, &out); err != nil {
		return host.RunInfo{}, err
	}
	a.throughServer(r)
	return out.Run, nil
}

// remoteReport is remoteRun, then the run reported as the local command
// would.
func (a *app) remoteReport(ctx context.Context, method, path string, body any, wait time.Duration) error {
	ri, err := a.remoteRun(ctx, method, path, body, wait)
	if err != nil {
		return err
	}
	return a.report(ri)
}

// remoteWaitTimers follows a run through the server while it waits on
// timers, which the server's scheduler fires, for up to d.
func (a *app) remoteWaitTimers(ctx context.Context, ri host.RunInfo, d time.Duration) (host.RunInfo, error) {
	r, err := a.server(false)
	if err != nil {
		return ri, err
	}
	deadline := time.Now().Add(d)
	for onTimers(ri) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ri, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		var out struct {
			Run host.RunInfo `json:"run"`
		}
		if _, err := r.do(ctx, http.MethodGet, "/v1/runs/"+escape(ri.ID), "", nil, 0, &out); err != nil {
			return ri, err
		}
		ri = out.Run
	}
	return ri, nil
}

// escape is url.PathEscape, for ids put in a request path.
func escape(s string) string { return url.PathEscape(s) }

// remoteBytes reads path from the running server's API as bytes (a
// history file).
func (a *app) remoteBytes(ctx context.Context, path string) ([]byte, error) {
	r, err := a.server(false)
	if err != nil {
		return nil, err
	}
	b, err := r.do(ctx, http.MethodGet, path, "", nil, 0, nil)
	if err != nil {
		return nil, err
	}
	a.throughServer(r)
	return b, nil
}

// remoteHistory reads a run's history through the running server's API.
func (a *app) remoteHistory(ctx context.Context, runID string) (*host.History, error) {
	r, err := a.server(false)
	if err != nil {
		return nil, err
	}
	b, err := r.do(ctx, http.MethodGet, "/v1/runs/"+escape(runID)+"/history", "", nil, 0, nil)
	if err != nil {
		return nil, err
	}
	return host.ReadHistory(bytes.NewReader(b))
}

// remoteUpload registers a plugin through the running server's API, which
// needs the admin token. The upload was classified here already; the
// server classifies it again, by the same rule.
func (a *app) remoteUpload(ctx context.Context, path string, module []byte, manifestPath string, d plugins.Decision) (host.Plugin, error) {
	r, err := a.server(true)
	if err != nil {
		return host.Plugin{}, err
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("module", filepath.Base(path))
	if err != nil {
		return host.Plugin{}, err
	}
	fw.Write(module)
	if manifestPath != "" {
		m, err := os.ReadFile(manifestPath)
		if err != nil {
			return host.Plugin{}, err
		}
		mw.WriteField("manifest", string(m))
	}
	if d.Kind == plugins.KindScript {
		mw.WriteField("name", d.Name)
	}
	if err := mw.Close(); err != nil {
		return host.Plugin{}, err
	}
	var p host.Plugin
	if _, err := r.do(ctx, http.MethodPost, "/v1/plugins", mw.FormDataContentType(), body.Bytes(), 0, &p); err != nil {
		return host.Plugin{}, err
	}
	a.throughServer(r)
	return p, nil
}

// callWait is how long a call, an answer or a hook resume through the
// server waits for its run to stop working: what the command does on the
// data directory is drive the run until it waits, so the server is given
// a minute (the server caps it at its --max-wait), or --wait when that is
// longer.
func callWait(wait time.Duration) time.Duration { return max(wait, time.Minute) }
