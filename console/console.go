// Package console is sandflow's operator web page, served by `sandflow
// serve` under /console/: an inbox of the questions runs ask a person, the
// runs with their timelines and actions (cancel, abort, rerun, resume a
// hook, upgrade), the sessions with their tasks and event streams, and the
// plugins with their versions.
//
// It is server-rendered html/template with one small script of its own
// (live updates over EventSource); everything is embedded, so it works
// offline and needs no build step. A browser signs in once with an API or
// admin token and gets an HttpOnly, SameSite=Strict cookie; every form post
// carries the sign-in's CSRF token. The console works only through the
// public APIs of packages host and session.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
)

//go:embed assets templates
var files embed.FS

// Errors the console answers with; each is returned wrapped in an
// *Error that carries its HTTP status.
var (
	// ErrSignInRequired is returned when a request has no valid sign-in.
	ErrSignInRequired = errors.New("console: sign in required")
	// ErrAdminRequired is returned when an action needs the admin token.
	ErrAdminRequired = errors.New("console: admin token required")
	// ErrCSRF is returned when a form post lacks its sign-in's CSRF token.
	ErrCSRF = errors.New("console: CSRF token missing or wrong")
	// ErrCrossOrigin is returned when a form is posted from another origin.
	ErrCrossOrigin = errors.New("console: cross-origin post")
	// ErrBadForm is returned when a form cannot be read or a field is wrong.
	ErrBadForm = errors.New("console: bad form")
	// ErrTooManyStreams is returned when Config.MaxStreams live pages are open.
	ErrTooManyStreams = errors.New("console: too many live streams")
)

// Error is an error with the HTTP status the console answers it with.
type Error struct {
	Status int
	Err    error
	Msg    string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func errf(status int, err error, format string, a ...any) *Error {
	return &Error{Status: status, Err: err, Msg: fmt.Sprintf(format, a...)}
}

// Config configures a Console. Zero fields take the defaults.
type Config struct {
	// APITokens sign in for everything but plugin uploads and deletions;
	// AdminTokens for those too.
	APITokens, AdminTokens []string
	// Logger receives errors the console could not show to anyone.
	Logger *slog.Logger
	// MaxUploadBytes bounds a plugin upload (default 64 MiB).
	MaxUploadBytes int64
	// MaxSignins bounds the signed-in browsers kept (default 1024).
	MaxSignins int
	// SessionTTL is how long a sign-in lasts (default 12h).
	SessionTTL time.Duration
	// MaxStreams bounds the live (EventSource) pages open at once (default 64).
	MaxStreams int
	// Wait is how long an action waits for its run to settle before the
	// page shows the run still going (default 5s).
	Wait time.Duration
	// PageSize is the number of runs a runs page lists (default 50).
	PageSize int
	// Sessions is the session manager whose sessions the sessions pages
	// show (the API server's: httpapi.Server.Sessions); without one those
	// pages are not found.
	Sessions *session.Manager
	// SearchBudget bounds the runs one runs page reads the input of when
	// it searches text (default 5000); past it the page says where it
	// stopped and links on.
	SearchBudget int
}

// Console serves the operator page. Its methods are safe for concurrent use.
type Console struct {
	h       *host.Host
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	pages   map[string]*template.Template
	signins *signins
	streams chan struct{} // a slot per open live stream

	ctx    context.Context // background work (a rerun's drive) runs on it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New makes a console over h. It needs at least one token.
func New(h *host.Host, cfg Config) (*Console, error) {
	if len(cfg.APITokens) == 0 && len(cfg.AdminTokens) == 0 {
		return nil, errors.New("console: no tokens configured")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 64 << 20
	}
	if cfg.MaxSignins <= 0 {
		cfg.MaxSignins = 1024
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Second
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	if cfg.SearchBudget <= 0 {
		cfg.SearchBudget = 5000
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Console{h: h, cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), pages: pages,
		signins: &signins{m: map[string]*signin{}, max: cfg.MaxSignins, ttl: cfg.SessionTTL, now: time.Now},
		streams: make(chan struct{}, cfg.MaxStreams), ctx: ctx, cancel: cancel}
	c.routes()
	return c, nil
}

// ServeHTTP serves the console's paths, all under /console/.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// Close stops the console's background work (runs it is driving stop at
// their next commit; the host's recovery continues them) and waits for it.
func (c *Console) Close(ctx context.Context) error {
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Console) routes() {
	static, _ := fs.Sub(files, "assets")
	c.mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /console/login", c.login)
	c.mux.HandleFunc("POST /console/login", c.login)
	c.mux.HandleFunc("POST /console/logout", c.page(roleAPI, c.logout))
	c.mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/inbox", http.StatusSeeOther)
	})
	c.mux.HandleFunc("GET /console/inbox", c.page(roleAPI, c.inbox))
	c.mux.HandleFunc("GET /console/inbox/stream", c.page(roleAPI, c.inboxStream))
	c.mux.HandleFunc("GET /console/questions/{id}", c.page(roleAPI, c.question))
	c.mux.HandleFunc("POST /console/questions/{id}/answer", c.page(roleAPI, c.answer))
	c.mux.HandleFunc("GET /console/runs", c.page(roleAPI, c.runs))
	c.mux.HandleFunc("GET /console/runs/{id}", c.page(roleAPI, c.run))
	c.mux.HandleFunc("GET /console/runs/{id}/stream", c.page(roleAPI, c.runStream))
	c.mux.HandleFunc("POST /console/runs/{id}/cancel", c.page(roleAPI, c.cancelRun))
	c.mux.HandleFunc("POST /console/runs/{id}/abort", c.page(roleAPI, c.abortRun))
	c.mux.HandleFunc("POST /console/runs/{id}/rerun", c.page(roleAPI, c.rerun))
	c.mux.HandleFunc("POST /console/runs/{id}/hook", c.page(roleAPI, c.resumeHook))
	c.mux.HandleFunc("POST /console/runs/{id}/upgrade", c.page(roleAPI, c.upgrade))
	c.mux.HandleFunc("GET /console/sessions", c.page(roleAPI, c.sessions))
	c.mux.HandleFunc("GET /console/sessions/{id}", c.page(roleAPI, c.sessionPage))
	c.mux.HandleFunc("GET /console/sessions/{id}/stream", c.page(roleAPI, c.sessionStream))
	c.mux.HandleFunc("GET /console/plugins", c.page(roleAPI, c.plugins))
	c.mux.HandleFunc("POST /console/plugins", c.page(roleAdmin, c.uploadPlugin))
	c.mux.HandleFunc("POST /console/plugins/{name}/versions/{version}/delete", c.page(roleAdmin, c.deletePlugin))
	c.mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, errf(http.StatusNotFound, errNotFound, "no such page: %s %s", r.Method, r.URL.Path))
	})
}

var errNotFound = errors.New("console: no such page")

// statusOf maps the host's typed errors to HTTP statuses.
func statusOf(err error) int {
	var ce *Error
	var nd *host.NonDeterminismError
	var ie *host.InputError
	var le *host.LimitError
	switch {
	case errors.As(err, &ce):
		return ce.Status
	case errors.Is(err, host.ErrRunNotFound), errors.Is(err, host.ErrUnknownAsk), errors.Is(err, host.ErrUnknownHook), errors.Is(err, host.ErrUnknownTool):
		return http.StatusNotFound
	case errors.Is(err, host.ErrAskClosed), errors.Is(err, host.ErrRunEnded), errors.Is(err, host.ErrPluginInUse), errors.As(err, &nd):
		return http.StatusConflict
	case errors.Is(err, host.ErrBadAnswer), errors.Is(err, host.ErrBadInput), errors.As(err, &ie), errors.Is(err, host.ErrBadManifest), errors.Is(err, host.ErrBadPlugin):
		return http.StatusBadRequest
	case errors.As(err, &le):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

func (c *Console) fail(w http.ResponseWriter, r *http.Request, si *signin, err error) {
	code := statusOf(err)
	msg := err.Error()
	if code == http.StatusInternalServerError {
		c.log.Error("console", "path", r.URL.Path, "err", err)
	}
	if r.Header.Get("Accept") == "text/event-stream" {
		http.Error(w, msg, code)
		return
	}
	c.render(w, r, code, "error", si, map[string]any{"Status": code, "StatusText": http.StatusText(code), "Message": msg})
}

// drive runs work on the console's context and waits for it up to
// Config.Wait; past that the work goes on and drive returns nil, the
// run page then showing where the run stands.
func (c *Console) drive(r *http.Request, work func(ctx context.Context) error) error {
	done := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := work(c.ctx)
		done <- err
		if err != nil && c.ctx.Err() == nil {
			c.log.Debug("console: driving a run", "err", err)
		}
	}()
	t := time.NewTimer(c.cfg.Wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}
