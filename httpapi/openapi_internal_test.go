package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// openAPIOperations is every "METHOD path" the committed document
// describes.
func openAPIOperations(t *testing.T) map[string]bool {
	t.Helper()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi.json is OpenAPI %q, want 3.1.x", doc.OpenAPI)
	}
	ops := map[string]bool{}
	for path, item := range doc.Paths {
		for _, m := range openAPIMethods {
			if _, ok := item[m]; ok {
				ops[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	return ops
}

// The OpenAPI document and the mux agree: every route the server
// registers is in the document, and every operation the document
// describes is served by the route of that method and path.
func TestOpenAPICoversTheRoutes(t *testing.T) {
	ops := openAPIOperations(t)
	s := &Server{mux: http.NewServeMux()}
	s.routes()

	want := []string{openAPIPattern}
	for _, rt := range routeTable {
		want = append(want, rt.pattern)
	}
	for _, p := range want {
		if !ops[p] {
			t.Errorf("route %s is not in openapi.json", p)
		}
	}
	webhookOps := 0
	param := regexp.MustCompile(`\{[^}]+\}`)
	for op := range ops {
		method, path, _ := strings.Cut(op, " ")
		r := httptest.NewRequest(method, param.ReplaceAllString(path, "x"), nil)
		_, pattern := s.mux.Handler(r)
		switch {
		case pattern == webhookPattern && path == webhookPattern:
			webhookOps++ // the webhook route takes any method
		case pattern != op:
			t.Errorf("openapi.json describes %s, but the server serves it with %q", op, pattern)
		}
	}
	if webhookOps == 0 {
		t.Errorf("openapi.json does not describe the webhook route %s", webhookPattern)
	}
	if t.Failed() {
		sort.Strings(want)
		t.Logf("routes: %s", strings.Join(want, "; "))
	}
}

// Every $ref in the document names a component it defines, and every
// operation has a unique operationId.
func TestOpenAPIReferencesResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	refs, ids := 0, map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, sub := range v {
				if k == "$ref" {
					refs++
					ref, _ := sub.(string)
					if !resolves(doc, ref) {
						t.Errorf("%s: $ref %q resolves to nothing", path, ref)
					}
				}
				if k == "operationId" {
					id, _ := sub.(string)
					if ids[id] {
						t.Errorf("%s: operationId %q twice", path, id)
					}
					ids[id] = true
				}
				walk(path+"/"+k, sub)
			}
		case []any:
			for _, sub := range v {
				walk(path+"[]", sub)
			}
		}
	}
	walk("", doc)
	if refs == 0 || len(ids) == 0 {
		t.Fatalf("the document has %d refs and %d operations", refs, len(ids))
	}
}

func resolves(doc map[string]any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var v any = doc
	for _, part := range strings.Split(rest, "/") {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
