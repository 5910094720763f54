package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/abi"
)

func TestHostAllowed(t *testing.T) {
	allow := []string{"api.example.com", "*.Example.org"}
	for host, want := range map[string]bool{
		"api.example.com":   true,
		"API.EXAMPLE.COM":   true,
		"x.api.example.com": false,
		"example.com":       false,
		"a.example.org":     true,
		"a.b.example.org":   true,
		"example.org":       false, // a wildcard is for subdomains only
		"badexample.org":    false,
	} {
		if got := hostAllowed(allow, host); got != want {
			t.Errorf("hostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

func request(t *testing.T, r abi.FetchRequest) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A request is made only to an allowed host, a redirect is followed only
// to one, and a body over the cap is refused, not cut.
func TestDoKeepsToTheAllowList(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached a host not allowed: %s", r.URL)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(strings.Repeat("x", 101)))
		default:
			w.Write([]byte("hi " + r.Method))
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	allow := []string{u.Hostname()}
	ctx := context.Background()

	out, err := Do(ctx, srv.Client(), allow, 100, request(t, abi.FetchRequest{URL: srv.URL + "/", Method: "POST"}))
	if err != nil {
		t.Fatal(err)
	}
	var resp abi.FetchResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.Status != 200 || resp.Body != "hi POST" {
		t.Fatalf("response %+v, %v", resp, err)
	}
	if _, err := Do(ctx, srv.Client(), []string{"elsewhere.example"}, 100, request(t, abi.FetchRequest{URL: srv.URL})); err == nil || !strings.Contains(err.Error(), "httpAllow") {
		t.Fatalf("a host not allowed: %v", err)
	}
	// A redirect from the allowed host to the other server, named by a
	// host name the list does not have.
	otherURL, _ := url.Parse(other.URL)
	otherURL.Host = "localhost:" + otherURL.Port()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherURL.String(), http.StatusFound)
	}))
	defer redirecting.Close()
	if _, err := Do(ctx, nil, allow, 100, request(t, abi.FetchRequest{URL: redirecting.URL})); !errors.Is(err, errRedirect) {
		t.Fatalf("a redirect to a host not allowed: %v", err)
	}
	if _, err := Do(ctx, srv.Client(), allow, 100, request(t, abi.FetchRequest{URL: srv.URL + "/big"})); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("a body over the cap: %v", err)
	}
	if _, err := Do(ctx, nil, allow, 100, request(t, abi.FetchRequest{URL: "file:///etc/passwd"})); err == nil {
		t.Fatal("a file URL was fetched")
	}
}
