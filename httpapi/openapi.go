package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the API, served at
// GET /v1/openapi.json. TestOpenAPICoversTheRoutes checks that it has
// every route the server serves and no other.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers with the document; it needs no token (it says
// nothing about the host's data).
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
