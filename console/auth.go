package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// cookieName is the console's session cookie. It is HttpOnly and
// SameSite=Strict, so page scripts cannot read it and other sites cannot
// send it; EventSource sends it, which a bearer header cannot be.
const cookieName = "sandflow_console"

type role int

const (
	roleNone role = iota
	roleAPI
	roleAdmin
)

// signin is one signed-in browser: its role and the CSRF token every form
// it posts must carry.
type signin struct {
	role    role
	csrf    string
	expires time.Time
}

// signins holds the signed-in browsers, at most max of them: signing in
// past that drops the expired ones, then the one that expires first.
type signins struct {
	mu  sync.Mutex
	m   map[string]*signin
	max int
	ttl time.Duration
	now func() time.Time
}

func (s *signins) add(r role) (id string, si *signin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max {
		var oldest string
		for k, v := range s.m {
			if now.After(v.expires) {
				delete(s.m, k)
			} else if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		if len(s.m) >= s.max {
			delete(s.m, oldest)
		}
	}
	id = randomHex(32)
	si = &signin{role: r, csrf: randomHex(32), expires: now.Add(s.ttl)}
	s.m[id] = si
	return id, si
}

func (s *signins) get(id string) *signin {
	s.mu.Lock()
	defer s.mu.Unlock()
	si := s.m[id]
	if si == nil {
		return nil
	}
	if s.now().After(si.expires) {
		delete(s.m, id)
		return nil
	}
	return si
}

func (s *signins) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// roleOfToken says what a token may do.
func (c *Console) roleOfToken(tok string) role {
	if tok == "" {
		return roleNone
	}
	for _, t := range c.cfg.AdminTokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			return roleAdmin
		}
	}
	for _, t := range c.cfg.APITokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			return roleAPI
		}
	}
	return roleNone
}

// current returns the request's sign-in, or nil.
func (c *Console) current(r *http.Request) (string, *signin) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return "", nil
	}
	return ck.Value, c.signins.get(ck.Value)
}

// sameOrigin refuses a post whose Origin header names another site: a
// second line behind SameSite cookies and the CSRF token.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// safeNext keeps a sign-in's redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/console/inbox"
	}
	return next
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		c.render(w, r, http.StatusOK, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
		return
	}
	if !sameOrigin(r) {
		c.fail(w, r, nil, errf(http.StatusForbidden, ErrCrossOrigin, "the form was posted from another site"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, errf(http.StatusBadRequest, ErrBadForm, "the form could not be read"))
		return
	}
	rl := c.roleOfToken(r.PostForm.Get("token"))
	if rl == roleNone {
		c.render(w, r, http.StatusUnauthorized, "login", nil, map[string]any{"Next": safeNext(r.PostForm.Get("next")), "Error": "That token is not valid."})
		return
	}
	id, _ := c.signins.add(rl)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/console/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(c.cfg.SessionTTL / time.Second)})
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id, _ := c.current(r)
	c.signins.remove(id)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/console/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
	return nil
}

// page wraps a handler that needs a sign-in (admin: the admin token). A GET
// without one is sent to the sign-in page; a POST must also carry the
// sign-in's CSRF token and come from this origin.
func (c *Console) page(need role, fn func(http.ResponseWriter, *http.Request, *signin) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, si := c.current(r)
		if si == nil {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, errf(http.StatusUnauthorized, ErrSignInRequired, "sign in first"))
			return
		}
		if si.role < need {
			c.fail(w, r, si, errf(http.StatusForbidden, ErrAdminRequired, "this needs the admin token"))
			return
		}
		if r.Method == http.MethodPost {
			if !sameOrigin(r) {
				c.fail(w, r, si, errf(http.StatusForbidden, ErrCrossOrigin, "the form was posted from another site"))
				return
			}
			if err := parseForm(w, r, c.cfg.MaxUploadBytes); err != nil {
				c.fail(w, r, si, err)
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(si.csrf)) != 1 {
				c.fail(w, r, si, errf(http.StatusForbidden, ErrCSRF, "the form's CSRF token is missing or wrong: reload the page and try again"))
				return
			}
		}
		if err := fn(w, r, si); err != nil {
			c.fail(w, r, si, err)
		}
	}
}

func parseForm(w http.ResponseWriter, r *http.Request, maxUpload int64) error {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		r.Body = http.MaxBytesReader(w, r.Body, maxUpload+1<<20)
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			return errf(http.StatusBadRequest, ErrBadForm, "the form could not be read: %v", err)
		}
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	if err := r.ParseForm(); err != nil {
		return errf(http.StatusBadRequest, ErrBadForm, "the form could not be read: %v", err)
	}
	return nil
}
