package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sandflow/sandflow/console"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/metrics"
)

// withConsole serves the operator console under /console/, /healthz,
// /readyz and /metrics beside the API, every request counted and logged
// by the metrics middleware. The returned function stops the console's
// background work; call it before closing the host.
func withConsole(h *host.Host, js *jsprogram.Engine, api http.Handler, cfg httpapi.Config, logger *slog.Logger) (http.Handler, func(context.Context) error, error) {
	c, err := console.New(h, console.Config{APITokens: cfg.APITokens, AdminTokens: cfg.AdminTokens,
		Logger: logger, MaxUploadBytes: cfg.MaxUploadBytes})
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New(h, logger)
	if js != nil {
		m.WatchJS(js)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", c)
	mux.HandleFunc("GET /healthz", metrics.Healthz)
	mux.HandleFunc("GET /readyz", metrics.Ready(h))
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("/", api)
	return m.Middleware(mux), c.Close, nil
}
