// Package fetch is the host's built-in http.fetch capability: an HTTP
// request to a host the plugin's manifest allows, its response body
// capped, redirects followed only to allowed hosts.
package fetch

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandflow/sandflow/abi"
)

// Timeout bounds one http.fetch call.
const Timeout = 30 * time.Second

// hostAllowed reports whether a URL's host matches a manifest's httpAllow
// list: exact host names, or "*.example.com" for its subdomains.
func hostAllowed(allow []string, host string) bool {
	host = strings.ToLower(host)
	for _, a := range allow {
		a = strings.ToLower(a)
		if a == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(a, "*."); ok && strings.HasSuffix(host, "."+suffix) {
			return true
		}
	}
	return false
}

// Do runs one http.fetch: input is an abi.FetchRequest, allow the
// plugin's httpAllow list, maxBody the most bytes of a response body it
// takes, and base the client it copies (http.DefaultClient if nil). The
// result is an abi.FetchResponse.
func Do(ctx context.Context, base *http.Client, allow []string, maxBody int64, input []byte) (json.RawMessage, error) {
	var req abi.FetchRequest
	if err := json.Unmarshal(input, &req); err != nil {
		return nil, fmt.Errorf("the input is not a fetch request: %v", err)
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q is not an http or https URL", req.URL)
	}
	if !hostAllowed(allow, u.Hostname()) {
		return nil, fmt.Errorf("host %q is not in the plugin's httpAllow list", u.Hostname())
	}
	body := []byte(req.Body)
	if req.BodyEncoding == "base64" {
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return nil, fmt.Errorf("the body is not base64: %v", err)
		}
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range req.Headers {
		hr.Header.Set(k, v)
	}
	client := httpClient(base, allow)
	resp, err := client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	max := maxBody
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("the response body is over the limit of %d bytes", max)
	}
	out := abi.FetchResponse{Status: resp.StatusCode, Headers: resp.Header}
	if utf8.Valid(data) {
		out.Body = string(data)
	} else {
		out.Body, out.BodyEncoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return json.Marshal(out)
}

// errRedirect is a redirect to a host the plugin may not reach.
var errRedirect = errors.New("redirect to a host the plugin may not reach")

func httpClient(base *http.Client, allow []string) *http.Client {
	if base == nil {
		base = http.DefaultClient
	}
	c := *base
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if !hostAllowed(allow, r.URL.Hostname()) {
			return fmt.Errorf("%w: %s", errRedirect, r.URL.Hostname())
		}
		return nil
	}
	return &c
}
