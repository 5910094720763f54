package console_test

import (
	"context"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/wasmtest"
)

// upload posts the console's upload form: the module as a file, and
// fields.
func (f *fixture) upload(cl *http.Client, csrf string, fields map[string]string, filename string, module []byte) *http.Response {
	f.t.Helper()
	var body strings.Builder
	mw := multipart.NewWriter(&body)
	mw.WriteField("csrf", csrf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("module", filename)
	fw.Write(module)
	mw.Close()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/console/plugins", strings.NewReader(body.String()))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := cl.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// TestAdminUploadRefusals: an upload that lacks what its kind needs is
// refused with a message that says so, and registers nothing.
func TestAdminUploadRefusals(t *testing.T) {
	f := newFixture(t, nil)
	admin := f.client()
	csrf := f.signIn(admin, adminToken)
	before, err := f.H.Plugins(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		module  []byte
		field   map[string]string
		status  int
		message string
	}{
		{"script without a name", []byte(tools["sleeper"]), nil, http.StatusBadRequest, "a script needs a tool name"},
		{"script with a blank name", []byte(tools["sleeper"]), map[string]string{"name": "  "}, http.StatusBadRequest, "a script needs a tool name"},
		// The manifest field left empty for a module is refused as the
		// empty manifest it is.
		{"module without a manifest", wasmtest.Guest(wasmtest.ReturnOne), map[string]string{"name": "x"}, http.StatusBadRequest, "invalid plugin manifest: EOF"},
		{"module with a bad manifest", wasmtest.Guest(wasmtest.ReturnOne), map[string]string{"manifest": `{"name":"x"}`}, http.StatusBadRequest, "invalid plugin manifest: entry is required"},
		{"script behind the wasm magic", append([]byte("\x00asm"), tools["sleeper"]...), map[string]string{"name": "x"}, http.StatusBadRequest, "invalid plugin manifest: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.upload(admin, csrf, tc.field, "upload", tc.module)
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(html.UnescapeString(string(page)), tc.message) {
				t.Fatalf("%s; want %d with %q", resp.Status, tc.status, tc.message)
			}
		})
	}
	after, err := f.H.Plugins(context.Background())
	if err != nil || len(after) != len(before) {
		t.Fatalf("refused uploads registered something: %d plugins before, %d after (%v)", len(before), len(after), err)
	}
}
