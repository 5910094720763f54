// Package httpapi serves a host's HTTP+JSON API: plugins (upload, list,
// delete a version), the tool list, calls, runs and their event streams
// (Server-Sent Events), questions, hooks and the webhooks runs create,
// the model-facing sessions of package session, and, for a platform that
// runs its own agents, agent turns as work items. API.md documents every
// endpoint, and the OpenAPI 3.1 document the Server serves at
// GET /v1/openapi.json describes each route it has. `sandflow serve` runs
// it.
//
// # Tokens
//
// Every API request carries a bearer token, one of Config's APITokens or
// AdminTokens; plugin uploads and deletions, and enabling the workflow
// tool, need an admin token. Webhook URLs carry no bearer token: their
// random 128-bit token is the credential. The OpenAPI document needs none.
//
// # Mounting
//
// A Server is the http.Handler of a whole origin: its routes are the
// absolute paths under /v1/ and the webhook URLs the host mints under
// /.well-known/workflow/v1/webhook/ (from host.Options.BaseURL), and it
// answers any other path with the API's JSON 404 or 405. Mount it at "/"
// and give the other surfaces their own paths beside it, as
// `sandflow serve` does (see the example):
//
//   - the MCP server (package mcp) at /mcp, wrapped in Admit so that its
//     requests are held to the API's bounds on calls and body bytes in
//     flight;
//   - the operator console (package console) under /console/, which
//     bounds its own live pages;
//   - /healthz, /readyz and /metrics (package metrics), whose middleware
//     can wrap the whole mux.
//
// Each is a handler of its own over the same host, with its own options;
// give them the API's tokens. None of them calls the others.
//
// # Connections
//
// NewHTTPServer makes the http.Server to serve with: every phase of a
// connection has a deadline (Config's timeouts), which the endpoints that
// wait (?wait=, manual webhooks, event streams) move themselves.
// LimitListener bounds the connections open at once. With an http.Server
// of one's own, give Config the timeouts it has: the endpoints that wait
// move the connection's deadlines by them.
//
// # Runs outlive their requests
//
// A call, an answer or a delivery drives its run on the Server's own
// context: a client that stops waiting, or goes away, loses nothing.
// Close stops those runs at their next commit point; shut the http.Server
// down first, then Close the Server, then the host. What was in flight is
// redone when the host recovers the run.
//
// A Server is safe for concurrent use, as an http.Handler must be.
package httpapi
