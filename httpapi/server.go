package httpapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// Config configures a Server. Zero fields take the defaults.
type Config struct {
	// APITokens may use the API; AdminTokens may too, and may also upload
	// and delete plugins. At least one token is required.
	APITokens, AdminTokens []string
	// MaxBodyBytes bounds a JSON request body (default 2 MiB);
	// MaxUploadBytes a plugin upload (default 64 MiB).
	MaxBodyBytes, MaxUploadBytes int64
	// MaxWait bounds how long a request may wait for a run (default 5 min).
	MaxWait time.Duration
	// WebhookTimeout is how long a manual webhook request waits for the
	// run's answer (default 30 s).
	WebhookTimeout time.Duration
	// ExternalAgents, when set, serves its agent turns as work items
	// under /v1/agent-turns, for a platform that runs its own agents.
	ExternalAgents *agents.External
	// Logger receives what no response can report: store damage, requests
	// that failed inside, runs that failed after their request stopped
	// waiting (default slog.Default()).
	Logger *slog.Logger

	// The connection deadlines NewHTTPServer sets: ReadHeaderTimeout
	// (default 10 s) for the request line and headers, ReadTimeout
	// (default 1 min) for the whole request, WriteTimeout (default 1 min)
	// for the response, IdleTimeout (default 1 min) for a keep-alive
	// connection between requests. A request that waits (?wait, a manual
	// webhook, an event stream) moves its own deadlines. Negative means
	// none.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxCalls bounds the tool calls in flight (default 256) and
	// MaxClientCalls one client's (by remote address, default 64).
	MaxCalls, MaxClientCalls int
	// MaxBodyInFlight bounds the request body bytes the server holds at
	// once (default 256 MiB) and MaxClientBodyInFlight one client's
	// (default 96 MiB); each is raised to at least one upload.
	MaxBodyInFlight, MaxClientBodyInFlight int64
}

// Server serves the API over one host. Make one with New; it is an
// http.Handler (see the package doc for where to mount it).
type Server struct {
	h   *host.Host
	cfg Config
	mux *http.ServeMux
	log *slog.Logger

	// Runs keep going after the request that started or resumed them has
	// been answered: they run on ctx, and Close waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sessions *session.Manager

	// calls and bodies admit requests (limits.go).
	calls, bodies *admission
}

// New makes a server over a host. It returns an error when cfg has no
// token, or a token shorter than 16 characters.
func New(h *host.Host, cfg Config) (*Server, error) {
	if len(cfg.APITokens)+len(cfg.AdminTokens) == 0 {
		return nil, errors.New("httpapi: at least one API or admin token is required")
	}
	for _, t := range append(append([]string(nil), cfg.APITokens...), cfg.AdminTokens...) {
		if len(t) < 16 {
			return nil, errors.New("httpapi: tokens must be at least 16 characters")
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 2 << 20
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 64 << 20
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 5 * time.Minute
	}
	if cfg.WebhookTimeout <= 0 {
		cfg.WebhookTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&cfg.ReadTimeout, DefaultReadTimeout},
		{&cfg.WriteTimeout, DefaultWriteTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			*d.v = 0 // none, as http.Server reads it
		}
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	if cfg.MaxClientCalls <= 0 {
		cfg.MaxClientCalls = min(DefaultMaxClientCalls, cfg.MaxCalls)
	}
	if cfg.MaxClientBodyInFlight <= 0 {
		cfg.MaxClientBodyInFlight = DefaultMaxClientBodyInFlight
	}
	cfg.MaxClientBodyInFlight = max(cfg.MaxClientBodyInFlight, cfg.MaxUploadBytes+uploadSlack, cfg.MaxBodyBytes)
	if cfg.MaxBodyInFlight <= 0 {
		cfg.MaxBodyInFlight = DefaultMaxBodyInFlight
	}
	cfg.MaxBodyInFlight = max(cfg.MaxBodyInFlight, cfg.MaxClientBodyInFlight)
	s := &Server{h: h, cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger, sessions: session.NewManager(h),
		calls:  newAdmission("calls", int64(cfg.MaxCalls), int64(cfg.MaxClientCalls)),
		bodies: newAdmission("request bytes", cfg.MaxBodyInFlight, cfg.MaxClientBodyInFlight)}
	if len(cfg.AdminTokens) == 0 {
		cfg.Logger.Warn("no admin token: plugin uploads and deletions and enabling the workflow tool are refused (403); give an admin token (serve --admin-token or SANDFLOW_ADMIN_TOKEN) to allow them")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops the runs the server is driving, at their next commit point,
// and waits for them (or for ctx). Nothing committed is lost; what was in
// flight is redone when the host recovers the run.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); s.sessions.Close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type role int

const (
	roleNone role = iota
	roleAPI
	roleAdmin
)

func (s *Server) routes() {
	api := func(pattern string, need role, fn func(http.ResponseWriter, *http.Request) error) {
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if got := s.roleOf(r); got < need {
				code, msg := http.StatusUnauthorized, "a bearer token is required"
				if got != roleNone {
					code, msg = http.StatusForbidden, "this needs the admin token"
				} else if r.Header.Get("Authorization") != "" {
					msg = "the bearer token is not valid"
				}
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="sandflow"`)
				}
				writeError(w, code, "unauthorized", msg)
				return
			}
			if r.ContentLength != 0 && r.Method != http.MethodGet {
				limit := s.cfg.MaxBodyBytes
				if pattern == "POST /v1/plugins" {
					limit = s.cfg.MaxUploadBytes + uploadSlack
				}
				release, err := s.admitBody(r, limit)
				if err != nil {
					s.fail(w, r, err)
					return
				}
				defer release()
			}
			if err := fn(w, r); err != nil {
				s.fail(w, r, err)
			}
		})
	}
	for _, rt := range routeTable {
		api(rt.pattern, rt.need, func(w http.ResponseWriter, r *http.Request) error { return rt.handle(s, w, r) })
	}
	s.mux.HandleFunc(openAPIPattern, s.serveOpenAPI)
	s.mux.HandleFunc(webhookPattern, s.webhook)
	s.mux.HandleFunc("/", s.noRoute)
}

// The routes besides the API's: the OpenAPI document, which needs no
// token, and webhook URLs, whose token is the credential (any method).
const (
	openAPIPattern = "GET /v1/openapi.json"
	webhookPattern = "/.well-known/workflow/v1/webhook/{token}"
)

// routeTable is every API endpoint: its pattern, the role it needs and
// its handler. openapi.json describes each one (TestOpenAPICoversTheRoutes).
var routeTable = []route{
	{"POST /v1/plugins", roleAdmin, (*Server).uploadPlugin},
	{"POST /v1/workflow-tool", roleAdmin, (*Server).enableWorkflowTool},
	{"GET /v1/plugins", roleAPI, (*Server).listPlugins},
	{"GET /v1/plugins/{name}", roleAPI, (*Server).showPlugin},
	{"DELETE /v1/plugins/{name}/versions/{version}", roleAdmin, (*Server).deletePluginVersion},
	{"GET /v1/tools", roleAPI, (*Server).listTools},
	{"POST /v1/tools/{name}/calls", roleAPI, (*Server).callTool},
	{"GET /v1/runs", roleAPI, (*Server).listRuns},
	{"GET /v1/runs/{id}", roleAPI, (*Server).showRun},
	{"GET /v1/runs/{id}/history", roleAPI, (*Server).runHistory},
	{"POST /v1/runs/{id}/cancel", roleAPI, (*Server).cancelRun},
	{"POST /v1/runs/{id}/abort", roleAPI, (*Server).abortRun},
	{"GET /v1/runs/{id}/events", roleAPI, (*Server).streamEvents},
	{"GET /v1/asks", roleAPI, (*Server).listAsks},
	{"GET /v1/asks/{id}", roleAPI, (*Server).showAsk},
	{"POST /v1/asks/{id}/answer", roleAPI, (*Server).answerAsk},
	{"POST /v1/asks/{id}/withdraw", roleAPI, (*Server).withdrawAsk},
	{"POST /v1/hooks/{token}", roleAPI, (*Server).resumeHook},
	{"GET /v1/sessions/{id}/tools", roleAPI, (*Server).sessionTools},
	{"POST /v1/sessions/{id}/calls", roleAPI, (*Server).sessionCall},
	{"GET /v1/sessions/{id}/calls/{runId}", roleAPI, (*Server).sessionAwait},
	{"POST /v1/sessions/{id}/results", roleAPI, (*Server).sessionResults},
	{"POST /v1/sessions/{id}/note", roleAPI, (*Server).sessionNote},
	{"GET /v1/sessions/{id}/tasks", roleAPI, (*Server).sessionTasks},
	{"POST /v1/sessions/{id}/steer", roleAPI, (*Server).sessionSteer},
	{"GET /v1/sessions/{id}/events", roleAPI, (*Server).sessionEvents},
	{"POST /v1/sessions/{id}/cancel", roleAPI, (*Server).sessionCancel},
	{"GET /v1/agent-turns", roleAPI, (*Server).listAgentTurns},
	{"POST /v1/agent-turns/{id}/claim", roleAPI, (*Server).claimAgentTurn},
	{"POST /v1/agent-turns/{id}/complete", roleAPI, (*Server).completeAgentTurn},
	{"POST /v1/agent-turns/{id}/fail", roleAPI, (*Server).failAgentTurn},
}

// route is one API endpoint.
type route struct {
	pattern string
	need    role
	handle  func(*Server, http.ResponseWriter, *http.Request) error
}

// noRoute answers a request no endpoint takes: 405 with Allow when the
// path is served under other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.WithContext(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("%s takes %s, not %s", quote(r.URL.Path), strings.Join(allow, ", "), quote(r.Method)))
		return
	}
	writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+quote(r.Method+" "+r.URL.Path))
}

func (s *Server) roleOf(r *http.Request) role {
	// The scheme is case-insensitive (RFC 9110, section 11.1).
	auth := r.Header.Get("Authorization")
	if len(auth) < len("Bearer ") || !strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
		return roleNone
	}
	tok := strings.TrimLeft(auth[len("Bearer "):], " ")
	if tok == "" {
		return roleNone
	}
	for _, t := range s.cfg.AdminTokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			return roleAdmin
		}
	}
	for _, t := range s.cfg.APITokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			return roleAPI
		}
	}
	return roleNone
}

// apiError is an error with the HTTP status and code it answers with.
type apiError struct {
	status int
	code   string
	msg    string
	detail map[string]any // more members of the error object, or nil
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...), nil}
}

// fail answers a request with the error, mapped to a status and a stable
// code.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var mb *http.MaxBytesError
	var pe *host.PluginError
	var ie *host.InputError
	var nd *host.NonDeterminismError
	switch {
	case errors.As(err, &ae):
		writeErrorDetail(w, ae.status, ae.code, ae.msg, ae.detail)
	case errors.Is(err, io.ErrUnexpectedEOF):
		// The client stopped sending, or was cut off by the read deadline.
		writeError(w, http.StatusBadRequest, "bad_request", "the request body ended before its length")
	case errors.As(err, &mb):
		writeErrorDetail(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is over the limit of %d bytes", mb.Limit), map[string]any{"limit": mb.Limit})
	case errors.As(err, &pe):
		status := http.StatusBadRequest
		if pe.Reason == "too_large" {
			status = http.StatusRequestEntityTooLarge
		}
		writeErrorDetail(w, status, "plugin_"+pe.Reason, pe.Error(), nil)
	case errors.As(err, &ie):
		writeErrorDetail(w, http.StatusBadRequest, "invalid_input", ie.Error(), map[string]any{"problems": ie.Problems})
	case errors.As(err, &nd):
		writeError(w, http.StatusConflict, "non_determinism", nd.Error())
	case errors.Is(err, host.ErrBadManifest):
		writeError(w, http.StatusBadRequest, "bad_manifest", err.Error())
	case errors.Is(err, host.ErrBadInput), errors.Is(err, host.ErrBadAnswer), errors.Is(err, host.ErrBadHistory):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, host.ErrLimit):
		writeError(w, http.StatusRequestEntityTooLarge, "limit", err.Error())
	case errors.Is(err, host.ErrUnknownTool), errors.Is(err, host.ErrRunNotFound), errors.Is(err, host.ErrUnknownAsk),
		errors.Is(err, host.ErrUnknownHook), errors.Is(err, store.ErrPluginNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, host.ErrAskClosed), errors.Is(err, host.ErrRunExists), errors.Is(err, host.ErrRunEnded),
		errors.Is(err, host.ErrPluginInUse):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, host.ErrLeaseLost):
		// This host stalled past the run's lease and another took the run
		// over; nothing after the loss was committed.
		writeError(w, http.StatusServiceUnavailable, "lease_lost", err.Error())
	case errors.Is(err, host.ErrLeaseHeld):
		writeError(w, http.StatusServiceUnavailable, "lease_held", err.Error())
	case errors.Is(err, store.ErrCorrupt):
		// Damage is reported, never passed off as a missing record or an
		// answer; `sandflow doctor` says where.
		s.log.Error("store damaged", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "store_corrupt", err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error: "+err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeErrorDetail(w, status, code, msg, nil)
}

func writeErrorDetail(w http.ResponseWriter, status int, code, msg string, detail map[string]any) {
	setRetryAfter(w, status)
	e := map[string]any{"code": code, "message": boundMessage(msg)}
	for k, v := range detail {
		e[k] = v
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// readJSON decodes a bounded JSON body into v.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		// No body is {}: the fields left out take their defaults, and a
		// handler refuses a required one as missing.
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("the request body is not valid JSON: %v", err)
	}
	return unknownFields(body, v)
}

// unknownFields refuses a body with a member v has no field for, by its
// exact name: encoding/json would match "optionid" to optionId and drop
// what it cannot place, so that a misspelt field would be ignored.
func unknownFields(body []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return badRequest("the request body must be a JSON object")
	}
	known := map[string]bool{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	for k := range members {
		if !known[k] {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			return badRequest("the request body has an unknown field %s (fields are case-sensitive: %s)", quote(k), strings.Join(names, ", "))
		}
	}
	return nil
}

// waitParam reads ?wait= (a duration like 30s, or seconds), bounded.
func (s *Server) waitParam(r *http.Request, def time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, badRequest("wait=%s is not a duration (30s) or a number of seconds", quote(v))
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, badRequest("wait must not be negative")
	}
	return min(d, s.cfg.MaxWait), nil
}

// uploadSlack is what a plugin upload's form may hold besides the module:
// the manifest and the other fields.
const uploadSlack = 4 << 20

// drive runs work on a run in the background, on the server's context,
// and returns its result if it finishes within wait; otherwise it returns
// the run's current state and the work goes on. release is called when
// the work is done (it frees the call's admission).
func (s *Server) drive(w http.ResponseWriter, r *http.Request, runID string, wait time.Duration, release func(), work func(ctx context.Context) (host.RunInfo, error)) (host.RunInfo, bool, error) {
	type result struct {
		ri  host.RunInfo
		err error
	}
	s.extendDeadlines(w, wait)
	done := make(chan result, 1)
	var abandoned atomic.Bool // the request stopped waiting: the work reports its own error
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer release()
		ri, err := work(s.ctx)
		done <- result{ri, err}
		if err != nil && s.ctx.Err() == nil && abandoned.Load() {
			s.log.Warn("driving run", "run", runID, "err", err)
		}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case res := <-done:
		return res.ri, true, res.err
	case <-timer.C:
		abandoned.Store(true)
	case <-r.Context().Done():
		abandoned.Store(true)
		return host.RunInfo{}, false, r.Context().Err()
	}
	ri, err := s.h.Run(context.WithoutCancel(r.Context()), runID)
	return ri, false, err
}
