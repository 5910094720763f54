// Package mcp serves a host's tools over the Model Context Protocol, with
// the official Go SDK: streamable HTTP (Handler, mounted by sandflow serve
// at /mcp) and stdio (ServeStdio, for desktop clients).
//
// Two eras of the protocol are served, routed on the version a client
// sends: 2026-07-28 (stateless; questions as multi-round-trip input
// requests; tasks as the extension io.modelcontextprotocol/tasks) and
// 2025-11-25 (sessions; questions as elicitation requests; tasks in the
// core protocol). The SDK speaks both eras' base protocol; this package
// adds what it lacks, tasks in both eras (see tasks.go and wire.go).
//
// A call starts its run and drives it on the server's own context, never
// the request's: a client that disconnects loses nothing, and the run's
// id is the task id a client polls, after a restart too. See RATIONALE.md,
// "Why does an MCP call drive its run on the server's context?".
package mcp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
)

// Protocol revisions served.
const (
	// Version20260728 is the current revision: stateless, tasks as an
	// extension.
	Version20260728 = "2026-07-28"
	// Version20251125 is the session revision with tasks in the core
	// protocol.
	Version20251125 = "2025-11-25"
	// TasksExtension names the tasks extension of the current revision.
	TasksExtension = "io.modelcontextprotocol/tasks"
	// SessionHeader carries a stateless client's session key: calls with
	// the same key share a sandflow session (its receipts, its results,
	// its 32-task limit).
	SessionHeader = "Sandflow-Session"
	// SessionMeta is the same key in a request's _meta, for stdio.
	SessionMeta = "io.sandflow/session"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes     = 4 << 20
	DefaultMaxArgumentBytes = 1 << 20
	DefaultCallWait         = 30 * time.Second
	DefaultSessionTimeout   = 30 * time.Minute
	DefaultToolPoll         = time.Second
	DefaultTaskTTL          = 24 * time.Hour
	DefaultMaxTaskTTL       = 7 * 24 * time.Hour
	DefaultMaxSessions      = 1000
)

// Options configure a Server; a zero field takes its default.
type Options struct {
	// Tokens are the bearer tokens Handler accepts; none accepts any
	// request (stdio, tests).
	Tokens []string
	// MaxBodyBytes bounds an HTTP request body (413 past it).
	MaxBodyBytes int64
	// MaxArgumentBytes bounds a tool call's arguments as JSON.
	MaxArgumentBytes int
	// CallWait is how long a call waits within its request for its run
	// to end or ask; past it the call becomes a task (a client with
	// tasks) or answers with what the run waits on.
	CallWait time.Duration
	// SessionTimeout closes an idle 2025-11-25 session.
	SessionTimeout time.Duration
	// ToolPoll is how often the tool list is compared with the host's
	// plugins, to tell clients when it changed.
	ToolPoll time.Duration
	// StdioSession is the sandflow session of a stdio connection that
	// names none in _meta; default "stdio".
	StdioSession string
	// TaskTTL is how long after its creation a task's result is served
	// when the client asks for no ttl (2026-07-28 has no field to ask
	// with); MaxTaskTTL bounds what a client may ask for. A task whose
	// run has not ended does not expire; an expired task's run and its
	// history stay.
	TaskTTL, MaxTaskTTL time.Duration
	// MaxSessions bounds the open 2025-11-25 sessions: past it, an
	// initialize closes the session idle the longest.
	MaxSessions int
	// Now is the clock task ttls are measured on; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// ErrClosed is returned to a request still waiting when the server
// closes; its run goes on after a restart.
var ErrClosed = errors.New("mcp: the server is shutting down")

// Server is an MCP server over a host. It is safe for concurrent use.
type Server struct {
	h        *host.Host
	sessions *session.Manager
	opts     Options
	sdk      *sdk.Server

	stateless, stateful *sdk.StreamableHTTPHandler

	// ctx is where runs are driven: it outlives every request; Close
	// ends it and waits for the drivers.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	tools toolSet
	// asking holds the ids of the questions asked outside a request
	// (2025-11-25 tasks), so that each is asked once at a time.
	asking sync.Map
	pushes pushes
	// activity is when each 2025-11-25 session was last used, to evict
	// the idle-longest past MaxSessions (sessions.go).
	activity activity
	// toolsChanged are the listen streams told when the tool list
	// changes (listen.go).
	toolsChanged sync.Map // chan struct{} → true
	closeOnce    sync.Once
}

// New makes a server over h.
func New(h *host.Host, opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxArgumentBytes <= 0 {
		o.MaxArgumentBytes = DefaultMaxArgumentBytes
	}
	if o.CallWait <= 0 {
		o.CallWait = DefaultCallWait
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.ToolPoll <= 0 {
		o.ToolPoll = DefaultToolPoll
	}
	if o.TaskTTL <= 0 {
		o.TaskTTL = DefaultTaskTTL
	}
	if o.MaxTaskTTL <= 0 {
		o.MaxTaskTTL = DefaultMaxTaskTTL
	}
	if o.TaskTTL > o.MaxTaskTTL {
		o.TaskTTL = o.MaxTaskTTL
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StdioSession == "" {
		o.StdioSession = "stdio"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{h: h, sessions: session.NewManager(h), opts: o, ctx: ctx, cancel: cancel}
	caps := &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}}
	caps.AddExtension(TasksExtension, nil)
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "sandflow", Version: "1"}, &sdk.ServerOptions{
		Capabilities: caps,
		Logger:       o.Logger,
		Instructions: "sandflow runs durable workflow tools. A call that waits on a person asks through elicitation; a task tool's call is an MCP task (poll it with tasks/get).",
	})
	s.sdk.AddReceivingMiddleware(s.middleware)
	if err := s.addTaskMethods(); err != nil {
		cancel()
		return nil, err
	}
	if err := s.syncTools(ctx); err != nil {
		cancel()
		return nil, err
	}
	get := func(*http.Request) *sdk.Server { return s.sdk }
	s.stateless = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		Stateless: true, MaxRequestBodyBytes: o.MaxBodyBytes, Logger: o.Logger, DisableLocalhostProtection: true})
	s.stateful = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		MaxRequestBodyBytes: o.MaxBodyBytes, SessionTimeout: o.SessionTimeout, Logger: o.Logger, DisableLocalhostProtection: true})
	s.wg.Add(1)
	go s.pollTools()
	return s, nil
}

// Close stops the server's runs at their next commit (they resume with
// the host's recovery) and waits for its goroutines.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		for ss := range s.sdk.Sessions() {
			ss.Close()
		}
		s.wg.Wait()
		s.sessions.Close()
	})
}

// Handler serves streamable HTTP. A request needs one of the tokens as
// its bearer token. A request whose MCP-Protocol-Version is 2026-07-28 or
// later goes to the stateless server; any other (an initialize, a
// 2025-11-25 session's requests) to the one that keeps sessions.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandflow"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"unauthorized: send an API token as the bearer token (Authorization: Bearer ...)"}}`)
			return
		}
		var body []byte
		if r.Method == http.MethodPost {
			var err error
			if body, err = liftHTTP(w, r, s.opts.MaxBodyBytes); err != nil {
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
		}
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= Version20260728 {
			if lr, ok := taskListen(body); ok {
				s.listen(w, r, lr)
				return
			}
			s.stateless.ServeHTTP(w, r)
			return
		}
		s.serveSession(w, r, bytes.Contains(body, []byte(`"initialize"`)))
	})
}

func (s *Server) authorized(r *http.Request) bool {
	if len(s.opts.Tokens) == 0 {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	for _, t := range s.opts.Tokens {
		if subtle.ConstantTimeCompare([]byte(got), []byte(t)) == 1 {
			return true
		}
	}
	return false
}

// ServeStdio serves one client on a transport of its own (sandflow mcp:
// stdin and stdout) until the client closes it or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, t sdk.Transport) error {
	lt := &liftTransport{s: s, t: t}
	ss, err := s.sdk.Connect(ctx, lt, nil)
	if err != nil {
		return err
	}
	s.stdioConn(ss, lt.conn)
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-closed
		return ctx.Err()
	case err := <-closed:
		return err
	}
}

// detached runs f on the server's context, so that what it starts goes
// on when the request that asked for it is gone, and waits for it while
// ctx lasts.
func (s *Server) detached(ctx context.Context, f func(context.Context) (host.RunInfo, error)) (host.RunInfo, error) {
	type out struct {
		ri  host.RunInfo
		err error
	}
	ch := make(chan out, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ri, err := f(s.ctx)
		ch <- out{ri, err}
	}()
	select {
	case o := <-ch:
		return o.ri, o.err
	case <-ctx.Done():
		return host.RunInfo{}, ctx.Err()
	case <-s.ctx.Done():
		return host.RunInfo{}, ErrClosed
	}
}
