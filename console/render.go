package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sandflow/sandflow/internal/sse"
)

// maxShownJSON bounds a JSON value shown on a page; the rest is cut with a note.
const maxShownJSON = 64 << 10

var funcs = template.FuncMap{
	"pretty": prettyJSON,
	"json":   func(v any) json.RawMessage { return rawJSON(v) },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
}

// prettyJSON indents a JSON value for a <pre>; html/template escapes it.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	if b.Len() > maxShownJSON {
		return b.String()[:maxShownJSON] + fmt.Sprintf("\n… (%d bytes more)", b.Len()-maxShownJSON)
	}
	return b.String()
}

// parsePages parses each page template with the layout and the partials.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/partials/*.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(files, "templates/pages/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		t, err := template.Must(base.Clone()).ParseFS(files, n)
		if err != nil {
			return nil, err
		}
		pages[strings.TrimSuffix(path.Base(n), ".html")] = t
	}
	return pages, nil
}

type view struct {
	Title  string
	Signin *signin
	CSRF   string
	Admin  bool
	Data   any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, page string, si *signin, data any) {
	v := view{Title: page, Signin: si, Data: data}
	if si != nil {
		v.CSRF, v.Admin = si.csrf, si.role >= roleAdmin
	}
	var b bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&b, "layout.html", v); err != nil {
		c.log.Error("console: rendering", "page", page, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// fragment renders one partial template (a live region) to a string.
func (c *Console) fragment(name string, si *signin, data any) (string, error) {
	v := view{Signin: si, Data: data}
	if si != nil {
		v.CSRF, v.Admin = si.csrf, si.role >= roleAdmin
	}
	var b bytes.Buffer
	err := c.pages["login"].ExecuteTemplate(&b, name, v)
	return b.String(), err
}

// sendFragment writes one server-sent event whose data is an HTML
// fragment, and flushes it: a live page shows each as it comes.
func sendFragment(sw *sse.Writer, event, html string) error {
	if err := sw.Send(sse.Event{Type: event, Data: []byte(html)}); err != nil {
		return err
	}
	return sw.Flush()
}

// stream takes a live-stream slot, starts the event stream and runs loop
// on it; loop returns when the page's stream ends or the client goes.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, loop func(*sse.Writer) error) error {
	select {
	case c.streams <- struct{}{}:
		defer func() { <-c.streams }()
	default:
		return errf(http.StatusServiceUnavailable, ErrTooManyStreams, "too many live pages are open; reload later")
	}
	// A live page outlasts the server's read and write timeouts; the
	// streams are bounded by their slots instead.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Cache-Control", "no-store")
	sw, err := sse.Start(w)
	if err != nil {
		return err
	}
	if err := loop(sw); err != nil && r.Context().Err() == nil && c.ctx.Err() == nil {
		c.log.Warn("console: stream", "path", r.URL.Path, "err", err)
	}
	return nil
}
