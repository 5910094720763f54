package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// uploadPlugin takes a multipart form with a "module" file and a
// "manifest" (a file or a field).
func (s *Server) uploadPlugin(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes+uploadSlack)
	if err := r.ParseMultipartForm(8 << 20); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			// The form's cap has the slack for the manifest and fields on
			// top; the limit that was set is the module's.
			return &apiError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the upload is over its limit: a module of at most %d bytes, and at most %d bytes of manifest and other fields", s.cfg.MaxUploadBytes, uploadSlack),
				map[string]any{"limit": s.cfg.MaxUploadBytes}}
		}
		return badRequest("the upload must be a multipart form with a module file and a manifest: %v", err)
	}
	defer r.MultipartForm.RemoveAll()
	// The body is in; checking and compiling it may take the compile
	// timeout, and the instance probe or the script's first run a little
	// more.
	s.extendDeadlines(w, s.h.CompileTimeout()+checkSlack)
	wasm, err := formFile(r, "module", s.cfg.MaxUploadBytes)
	if err != nil {
		return err
	}
	// The manifest's cap holds whichever way it comes: a form field, or a
	// file part (formFile).
	rawManifest := []byte(r.FormValue("manifest"))
	if int64(len(rawManifest)) > s.cfg.MaxBodyBytes {
		return &apiError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the manifest field is %d bytes, over the limit of %d", len(rawManifest), s.cfg.MaxBodyBytes), map[string]any{"limit": s.cfg.MaxBodyBytes}}
	}
	if n := len(r.FormValue("name")); n > 256 {
		return badRequest("the name field is %d bytes, over the limit of 256", n)
	}
	u := plugins.Upload{Module: wasm, Name: r.FormValue("name")}
	if len(rawManifest) > 0 {
		u.Manifest = func() ([]byte, error) { return rawManifest, nil }
	} else if len(r.MultipartForm.File["manifest"]) > 0 {
		u.Manifest = func() ([]byte, error) { return formFile(r, "manifest", s.cfg.MaxBodyBytes) }
	}
	d, err := plugins.Classify(u)
	var ue *plugins.UploadError
	switch {
	case errors.As(err, &ue) && ue.Problem == plugins.ProblemNoName:
		return badRequest("a JavaScript tool needs a \"name\" field (a WebAssembly module needs a manifest)")
	case errors.As(err, &ue) && ue.Problem == plugins.ProblemNoManifest:
		return badRequest("the form has no %s file", quote("manifest"))
	case err != nil:
		return err
	}
	p, err := jsprogram.Register(r.Context(), s.h, d)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, p)
}

// checkSlack is what an upload may take past its compile: the probe of an
// instance, a script's first run in a worker.
const checkSlack = 30 * time.Second

// maxNameBytes bounds a name or token a path or query gives (tool names
// are at most 64 bytes, tokens and run ids shorter than this): a longer
// one names nothing, and is refused before it reaches the host, whose
// errors would quote it whole.
const maxNameBytes = 256

// enableWorkflowTool registers the workflow tool (JavaScript programs
// that call agents), or a new version of it: {"name"?, "maxSubagents"?}.
func (s *Server) enableWorkflowTool(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name         string `json:"name"`
		MaxSubagents int    `json:"maxSubagents"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	s.extendDeadlines(w, s.h.CompileTimeout()+checkSlack)
	agents, err := s.h.Agents(r.Context())
	if err != nil {
		return err
	}
	p, err := jsprogram.RegisterWorkflowTool(r.Context(), s.h, jsprogram.WorkflowTool{Name: req.Name, MaxSubagents: req.MaxSubagents, Agents: agents})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, p)
}

func formFile(r *http.Request, field string, limit int64) ([]byte, error) {
	f, _, err := r.FormFile(field)
	if err != nil {
		return nil, badRequest("the form has no %s file", quote(field))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &apiError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the %s file is over the limit of %d bytes", field, limit), map[string]any{"limit": limit}}
	}
	return b, nil
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.h.Plugins(r.Context())
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []host.Plugin{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"plugins": ps})
}

func (s *Server) showPlugin(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.h.Plugins(r.Context())
	if err != nil {
		return err
	}
	var versions []host.Plugin
	for _, p := range ps {
		if p.Name == r.PathValue("name") {
			versions = append(versions, p)
		}
	}
	if len(versions) == 0 {
		return &apiError{http.StatusNotFound, "not_found", "no plugin " + quote(r.PathValue("name")), nil}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i].Version < versions[j].Version })
	return writeJSON(w, http.StatusOK, map[string]any{"name": r.PathValue("name"), "versions": versions})
}

func (s *Server) deletePluginVersion(w http.ResponseWriter, r *http.Request) error {
	v, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || v <= 0 {
		return badRequest("version %s is not a positive number", quote(r.PathValue("version")))
	}
	if err := s.h.DeletePluginVersion(r.Context(), r.PathValue("name"), v); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.h.Tools(r.Context())
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []host.Tool{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": ts})
}

// callTool starts a run and answers with it: finished when it finished
// within ?wait (default 0), else as it stands (202) while it goes on.
func (s *Server) callTool(w http.ResponseWriter, r *http.Request) error {
	wait, err := s.waitParam(r, 0)
	if err != nil {
		return err
	}
	if name := r.PathValue("name"); len(name) > maxNameBytes {
		return &apiError{http.StatusNotFound, "not_found", "no tool is called " + quote(name), nil}
	}
	q := r.URL.Query()
	opts := &host.CallOptions{RunID: q.Get("runId"), NoAsk: q.Get("noAsk") == "true"}
	if len(opts.RunID) > maxNameBytes {
		return badRequest("runId %s is not a run id", quote(opts.RunID))
	}
	if v := q.Get("version"); v != "" {
		if opts.Version, err = strconv.Atoi(v); err != nil || opts.Version <= 0 {
			return badRequest("version %s is not a positive number", quote(v))
		}
	}
	input, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	release, err := s.admitCall(r)
	if err != nil {
		return err
	}
	started, err := s.h.Start(r.Context(), r.PathValue("name"), input, opts)
	if err != nil {
		release()
		return err
	}
	ri, done, err := s.drive(w, r, started.ID, wait, release, func(ctx context.Context) (host.RunInfo, error) {
		return s.h.Drive(ctx, started.ID)
	})
	return s.answerRun(w, ri, done, err)
}

// answerRun writes a run: 200 when the work finished (the run ended or
// waits), 202 when it is still going.
func (s *Server) answerRun(w http.ResponseWriter, ri host.RunInfo, done bool, err error) error {
	if err != nil && ri.ID == "" {
		return err
	}
	status := http.StatusOK
	if !done || ri.Status == store.StatusRunning {
		status = http.StatusAccepted
	}
	return writeJSON(w, status, map[string]any{"run": ri})
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.RunFilter{Status: store.RunStatus(q.Get("status")), Tool: q.Get("tool")}
	switch f.Status {
	case "", store.StatusRunning, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCancelled:
	default:
		return badRequest("status %s is not running, waiting, completed, failed or cancelled", quote(string(f.Status)))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return badRequest("limit %s is not a count", quote(v))
		}
		f.Limit = n
	}
	runs, err := s.h.Runs(r.Context(), f)
	if err != nil {
		return err
	}
	if runs == nil {
		runs = []store.Run{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"runs": runs})
}

func (s *Server) showRun(w http.ResponseWriter, r *http.Request) error {
	ri, err := s.h.Run(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"run": ri})
}

// runHistory is GET /v1/runs/{id}/history: the run's history file, as
// `sandflow runs export` writes it (zstd-compressed JSON, read back by
// host.ReadHistory and `sandflow replay --history`).
func (s *Server) runHistory(w http.ResponseWriter, r *http.Request) error {
	var buf bytes.Buffer
	if err := s.h.ExportHistory(r.Context(), r.PathValue("id"), &buf); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/zstd")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", r.PathValue("id")+".history.zst"))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, err := w.Write(buf.Bytes())
	return err
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	return s.endRun(w, r, "cancelled through the API", s.h.Cancel)
}

// endRun serves a cancel or an abort: an optional {"reason"} body, the
// run's state after.
func (s *Server) endRun(w http.ResponseWriter, r *http.Request, def string, end func(context.Context, string, string) (host.RunInfo, error)) error {
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := s.readJSON(w, r, &body); err != nil {
			return err
		}
	}
	if body.Reason == "" {
		body.Reason = def
	}
	ri, err := end(r.Context(), r.PathValue("id"), body.Reason)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"run": ri})
}

// abortRun is POST /v1/runs/{id}/abort {"reason"?}: the run's abort
// signal fires and it has the host's grace period to unwind.
func (s *Server) abortRun(w http.ResponseWriter, r *http.Request) error {
	return s.endRun(w, r, "aborted through the API", s.h.Abort)
}

func (s *Server) listAsks(w http.ResponseWriter, r *http.Request) error {
	qs, err := s.h.Questions(r.Context(), r.URL.Query().Get("all") != "true")
	if err != nil {
		return err
	}
	if qs == nil {
		qs = []host.Question{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"asks": qs})
}

// showAsk is GET /v1/asks/{id}: one question, open or settled, whole.
func (s *Server) showAsk(w http.ResponseWriter, r *http.Request) error {
	q, err := s.h.Question(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"ask": q})
}

// answerAsk records an answer and continues the run, answering within
// ?wait (default 10s) with the run. The answer is committed before any
// answer is given, however short the wait: a refusal (a wrong option, a
// question already settled) is a 4xx, and a 2xx means the answer is
// stored.
func (s *Server) answerAsk(w http.ResponseWriter, r *http.Request) error {
	var a host.Answer
	if err := s.readJSON(w, r, &a); err != nil {
		return err
	}
	return s.settle(w, r, func(ctx context.Context) (host.RunInfo, error) {
		return s.h.RecordAnswer(ctx, r.PathValue("id"), a)
	})
}

func (s *Server) withdrawAsk(w http.ResponseWriter, r *http.Request) error {
	return s.settle(w, r, func(ctx context.Context) (host.RunInfo, error) {
		return s.h.RecordWithdraw(ctx, r.PathValue("id"))
	})
}

// settle commits a question's settlement (record), then drives its run:
// refusals come back at once, and the drive goes on in the background
// past the wait.
func (s *Server) settle(w http.ResponseWriter, r *http.Request, record func(ctx context.Context) (host.RunInfo, error)) error {
	wait, err := s.waitParam(r, 10*time.Second)
	if err != nil {
		return err
	}
	// Admitted before anything is recorded: a refusal changes nothing.
	release, err := s.admitCall(r)
	if err != nil {
		return err
	}
	// The commit is not cut short by a client that leaves: once begun it
	// either happens or fails as a whole.
	recorded, err := record(context.WithoutCancel(r.Context()))
	if err != nil {
		release()
		return err
	}
	ri, done, err := s.drive(w, r, recorded.ID, wait, release, func(ctx context.Context) (host.RunInfo, error) {
		return s.h.Drive(ctx, recorded.ID)
	})
	if err != nil && ri.ID == "" {
		// The answer is committed whatever happened to the drive: the
		// run as it stands.
		ri, done = recorded, false
	}
	return s.answerRun(w, ri, done, nil)
}

func (s *Server) resumeHook(w http.ResponseWriter, r *http.Request) error {
	if token := r.PathValue("token"); len(token) > maxNameBytes {
		return &apiError{http.StatusNotFound, "not_found", "no live hook holds the token " + quote(token), nil}
	}
	wait, err := s.waitParam(r, 10*time.Second)
	if err != nil {
		return err
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	if !json.Valid(payload) {
		return badRequest("the hook payload is not JSON")
	}
	// The payload is recorded first, so refusals (an unknown token, say)
	// come back at once; then the run goes on, in the background past the
	// wait.
	release, err := s.admitCall(r)
	if err != nil {
		return err
	}
	delivered, err := s.h.DeliverHook(r.Context(), r.PathValue("token"), payload)
	if err != nil {
		release()
		return err
	}
	ri, done, err := s.drive(w, r, delivered.ID, wait, release, func(ctx context.Context) (host.RunInfo, error) {
		return s.h.Drive(ctx, delivered.ID)
	})
	return s.answerRun(w, ri, done, err)
}

// webhook serves the URLs webhooks hand out: any method, the token in the
// path is the credential. The token is checked before the body is read,
// so a request to no live webhook costs nothing but its headers.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	if len(token) > maxNameBytes {
		s.fail(w, r, &apiError{http.StatusNotFound, "not_found", "no live webhook has this URL", nil})
		return
	}
	if _, err := s.h.Store().Hook(r.Context(), token); err != nil {
		if errors.Is(err, store.ErrHookNotFound) {
			err = &apiError{http.StatusNotFound, "not_found", "no live webhook has this URL", nil}
		}
		s.fail(w, r, err)
		return
	}
	releaseBody, err := s.admitBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer releaseBody()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req := abi.WebhookRequest{Method: r.Method, URL: r.URL.RequestURI(), Headers: map[string][]string{}}
	for k, v := range r.Header {
		if k == "Authorization" || k == "Cookie" {
			continue // credentials meant for the host are not the run's
		}
		req.Headers[k] = v
	}
	if utf8.Valid(body) {
		req.Body = string(body)
	} else {
		req.Body, req.BodyEncoding = base64.StdEncoding.EncodeToString(body), "base64"
	}
	release, err := s.admitCall(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.h.DeliverWebhook(r.Context(), token, req)
	if err != nil {
		release()
		s.fail(w, r, err)
		return
	}
	// The run goes on whatever happens to this request.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer release()
		if _, err := s.h.Drive(s.ctx, d.RunID); err != nil && s.ctx.Err() == nil {
			s.log.Warn("driving run", "run", d.RunID, "err", err)
		}
	}()
	resp := d.Response
	if resp == nil {
		s.extendDeadlines(w, s.cfg.WebhookTimeout)
		if resp, err = s.awaitResponse(r, d); err != nil {
			if r.Context().Err() == nil {
				writeError(w, http.StatusGatewayTimeout, "timeout", err.Error())
			}
			return
		}
	}
	out := []byte(resp.Body)
	if resp.BodyEncoding == "base64" {
		out, _ = base64.StdEncoding.DecodeString(resp.Body) // checked when the run recorded it
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.Status)
	w.Write(out)
}

// awaitResponse waits for the run to answer a manual webhook request.
func (s *Server) awaitResponse(r *http.Request, d host.WebhookDelivery) (*abi.HTTPResponse, error) {
	ch, stop := s.h.Watch(d.RunID)
	defer stop()
	timeout := time.NewTimer(s.cfg.WebhookTimeout)
	defer timeout.Stop()
	for {
		resp, err := s.h.WebhookResponse(r.Context(), d.RunID, d.Hook, d.Index)
		if err != nil {
			return nil, err
		}
		if resp != nil {
			return resp, nil
		}
		select {
		case <-ch:
		case <-timeout.C:
			return nil, fmt.Errorf("run %s did not answer within %s", d.RunID, s.cfg.WebhookTimeout)
		case <-r.Context().Done():
			return nil, r.Context().Err()
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
}
