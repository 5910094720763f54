package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"time"
)

// Admit puts another surface served beside the API (the MCP server at
// /mcp) under the API's bounds: a request's body counts against the bytes
// in flight and must arrive whole within the read timeout and
// MaxBodyBytes, and a POST holds a call slot while it is served, so that
// past the server's or a client's share it gets 503 or 429 with
// Retry-After as the API's own endpoints do. Once its body is in, a
// request's deadlines are cleared: the surface's responses may stream or
// wait for a run as long as it needs (connections stay bounded by the
// listener's limit and the idle timeout).
func (s *Server) Admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		releaseBody, err := s.admitBody(r, s.cfg.MaxBodyBytes)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer releaseBody()
		if r.Method == http.MethodPost {
			releaseCall, err := s.admitCall(r)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			defer releaseCall()
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
			if err != nil {
				s.fail(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		next.ServeHTTP(w, r)
	})
}
