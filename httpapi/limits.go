package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Defaults of the server's bounds: the Config fields of the same names
// take them when zero.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = time.Minute
	DefaultIdleTimeout       = time.Minute
	// DefaultMaxConns is the connections `sandflow serve` keeps open at
	// once, by LimitListener.
	DefaultMaxConns = 1024
	// DefaultMaxCalls bounds the tool calls in flight at once; a call
	// holds about 1 MB while it runs.
	DefaultMaxCalls = 256
	// DefaultMaxClientCalls bounds one client's calls in flight.
	DefaultMaxClientCalls = 64
	// DefaultMaxBodyInFlight bounds the request bytes the server holds at
	// once (bodies being read or decoded).
	DefaultMaxBodyInFlight = 256 << 20
	// DefaultMaxClientBodyInFlight bounds one client's.
	DefaultMaxClientBodyInFlight = 96 << 20
	// retryAfter is what a refused request is told to wait, in seconds.
	retryAfter = 1
)

// NewHTTPServer makes the http.Server `sandflow serve` runs the API with:
// every phase of a connection has a deadline (Config's timeouts), so a
// client that trickles a body or holds a connection idle cannot keep it.
// Endpoints that wait (?wait, webhooks, event streams) extend the write
// deadline themselves.
func NewHTTPServer(s *Server) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
}

// LimitListener accepts at most n connections at once; past that, Accept
// waits for one to close (the kernel's backlog holds the rest). Closing it
// ends a waiting Accept, so that a server's Shutdown does not wait on it.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// admission counts what requests hold (calls in flight, request bytes in
// flight), in all and per client, and refuses past the bounds: 429 when a
// client is over its share, 503 when the server is full.
type admission struct {
	mu       sync.Mutex
	total    int64
	byClient map[string]int64
	max      int64
	perMax   int64
	what     string
}

func newAdmission(what string, max, perClient int64) *admission {
	return &admission{byClient: map[string]int64{}, max: max, perMax: perClient, what: what}
}

// acquire takes n units for client, or returns the refusal.
func (a *admission) acquire(client string, n int64) (release func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byClient[client]+n > a.perMax {
		return nil, &apiError{http.StatusTooManyRequests, "too_many_requests", fmt.Sprintf("this client has too many %s in flight (limit %d): retry after %d s", a.what, a.perMax, retryAfter), nil}

	}
	if a.total+n > a.max {
		return nil, &apiError{http.StatusServiceUnavailable, "overloaded", fmt.Sprintf("the server has too many %s in flight (limit %d): retry after %d s", a.what, a.max, retryAfter), nil}

	}
	a.total += n
	a.byClient[client] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.total -= n
			if a.byClient[client] -= n; a.byClient[client] <= 0 {
				delete(a.byClient, client)
			}
		})
	}, nil
}

// clientOf is who a request counts against: its remote IP.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// admitBody reserves the request's body bytes (its Content-Length, or
// limit when it has none) for as long as the request is served.
func (s *Server) admitBody(r *http.Request, limit int64) (func(), error) {
	n := r.ContentLength
	if n < 0 || n > limit {
		n = limit // a longer body is refused at limit when read
	}
	if n == 0 {
		return func() {}, nil
	}
	return s.bodies.acquire(clientOf(r), n)
}

// admitCall reserves a call slot for the request.
func (s *Server) admitCall(r *http.Request) (func(), error) {
	return s.calls.acquire(clientOf(r), 1)
}

// extendDeadlines moves the connection's read and write deadlines to d
// from now plus the write timeout, for a handler about to wait d (the
// server's read deadline would otherwise end the request's context
// mid-wait); an event stream clears them instead (d < 0) and sets a write
// deadline per write. Without configured timeouts, or on a writer that
// cannot, it does nothing.
func (s *Server) extendDeadlines(w http.ResponseWriter, d time.Duration) {
	if s.cfg.WriteTimeout <= 0 && s.cfg.ReadTimeout <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	if d < 0 {
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		return
	}
	at := time.Now().Add(d + max(s.cfg.WriteTimeout, s.cfg.ReadTimeout))
	_ = rc.SetReadDeadline(at)
	_ = rc.SetWriteDeadline(at)
}

// streamWrite gives the next writes of an event stream the write timeout.
func (s *Server) streamWrite(w http.ResponseWriter) {
	if s.cfg.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
}

// setRetryAfter adds Retry-After to a refusal that has one.
func setRetryAfter(w http.ResponseWriter, status int) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
}

// excerptMax is how much of an input an error message quotes.
const excerptMax = 64

// quote quotes at most excerptMax bytes of an input for an error message,
// saying how long it was when it cut it.
func quote(v string) string {
	if len(v) <= excerptMax {
		return strconv.Quote(v)
	}
	cut := excerptMax
	for cut > 0 && !utf8RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(v[:cut]), len(v))
}

func utf8RuneStart(b byte) bool { return b&0xc0 != 0x80 }

// messageMax bounds an error message as a last resort: messages from
// below (the host's) may carry inputs too.
const messageMax = 1024

func boundMessage(m string) string {
	if len(m) <= messageMax {
		return m
	}
	cut := messageMax
	for cut > 0 && !utf8RuneStart(m[cut]) {
		cut--
	}
	return m[:cut] + fmt.Sprintf("… (%d bytes)", len(m))
}
