package httpapi_test

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"

	"github.com/sandflow/sandflow/console"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/mcp"
)

// The API at the root of a server, with the MCP server and the operator
// console beside it over the same host and tokens, as `sandflow serve`
// mounts them; then the order of shutting down.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:7310")
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.OpenDir(ctx, "sandflow-data", &host.Options{BaseURL: "http://127.0.0.1:7310"})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(context.Background())

	cfg := httpapi.Config{APITokens: []string{os.Getenv("SANDFLOW_API_TOKEN")}, AdminTokens: []string{os.Getenv("SANDFLOW_ADMIN_TOKEN")}}
	api, err := httpapi.New(h, cfg)
	if err != nil {
		log.Fatal(err)
	}
	mcpSrv, err := mcp.New(h, &mcp.Options{Tokens: slices.Concat(cfg.APITokens, cfg.AdminTokens)})
	if err != nil {
		log.Fatal(err)
	}
	defer mcpSrv.Close()
	con, err := console.New(h, console.Config{APITokens: cfg.APITokens, AdminTokens: cfg.AdminTokens, Sessions: api.Sessions()})
	if err != nil {
		log.Fatal(err)
	}
	defer con.Close(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/mcp", api.Admit(mcpSrv.Handler()))
	mux.Handle("/console/", con)
	mux.Handle("/", api)
	srv := httpapi.NewHTTPServer(api)
	srv.Handler = mux
	go func() {
		if err := srv.Serve(httpapi.LimitListener(ln, httpapi.DefaultMaxConns)); !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()

	<-ctx.Done()
	mcpSrv.Close() // ends its streams, so that Shutdown need not wait for them
	if err := srv.Shutdown(context.Background()); err != nil {
		log.Print(err)
	}
	if err := api.Close(context.Background()); err != nil {
		log.Print(err)
	}
}
