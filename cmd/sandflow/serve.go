package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/mcp"
	"github.com/sandflow/sandflow/store"
)

// tokensFile holds the tokens serve made when none were given.
const tokensFile = "tokens.json"

type tokens struct {
	API   string `json:"api"`
	Admin string `json:"admin"`
}

func serveCmd(a *app) *cobra.Command {
	var addr, baseURL, apiToken, adminToken string
	var maxUpload int64
	var preInit, snapshots int
	var shutdownWait time.Duration
	var commitNotices bool
	var readTimeout, writeTimeout, idleTimeout, compileTimeout time.Duration
	var maxConns, maxCalls, maxClientCalls, maxCompiles int
	var maxInflight, maxClientInflight int64
	var mcpOpts mcp.Options
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API and run the scheduler (timers, step retries, recovery) until interrupted",
		Long: `Serve runs the HTTP API (see API.md) on --addr and the scheduler that
fires durable timers and step retries and recovers runs a stopped process
left running. With --addr "" it runs the scheduler alone.

API requests need a bearer token: --api-token (SANDFLOW_API_TOKEN) for
the API, --admin-token (SANDFLOW_ADMIN_TOKEN) for plugin uploads and
deletions too. Without either, serve makes both on first start and keeps
them in tokens.json in the data directory (mode 0600).

On SIGINT or SIGTERM it stops taking requests, lets running requests
finish, stops the runs it is driving at their next commit, and exits;
nothing committed is lost, and what was in flight is redone on restart.

The server is bounded: every connection has read, write and idle
deadlines (requests that wait move theirs), at most --max-conns are open
at once, and calls and request bytes in flight are admitted up to a
limit per client (past it: 429 with Retry-After) and for the server
(503). A module compiles within --compile-timeout, at most --max-compiles
at once.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger := slog.New(slog.NewTextHandler(a.errOut, nil))
			if apiToken == "" {
				apiToken = os.Getenv("SANDFLOW_API_TOKEN")
			}
			if adminToken == "" {
				adminToken = os.Getenv("SANDFLOW_ADMIN_TOKEN")
			}
			var ln net.Listener
			if addr != "" {
				var err error
				if ln, err = net.Listen("tcp", addr); err != nil {
					return fmt.Errorf("listening on %s: %w", addr, err)
				}
				defer ln.Close()
				if baseURL == "" {
					var guessed bool
					baseURL, guessed = defaultBaseURL(ln.Addr())
					if guessed {
						logger.Warn("listening on every interface: webhook and run URLs use " + baseURL + "; give --base-url with the URL clients reach this server at")
					}
				}
			}
			h, err := a.openWith(ctx, &host.Options{BaseURL: strings.TrimSuffix(baseURL, "/"), MaxModuleBytes: int(maxUpload), PreInit: preInit, Snapshots: snapshots,
				CompileTimeout: compileTimeout, MaxCompiles: maxCompiles, CommitNotices: commitNotices})
			if err != nil {
				if errors.Is(err, store.ErrLocked) {
					return lockedError(a.dataDir, err)
				}
				return err
			}
			defer a.closeEngines()
			defer h.Close(context.Background())
			// The embedded store builds its run index on the first list,
			// holding its writes meanwhile: here, before any run is driven
			// or any request served, not on the first page or scrape.
			if _, err := h.Runs(ctx, store.RunFilter{Limit: 1}); err != nil {
				return err
			}

			schedDone := make(chan error, 1)
			schedCtx, stopSched := context.WithCancel(context.Background())
			defer stopSched()
			go func() { schedDone <- h.RunScheduler(schedCtx, logger) }()

			var srv *http.Server
			var api *httpapi.Server
			instance := randomHex(16)
			var mcpSrv *mcp.Server
			if ln != nil {
				if apiToken == "" && adminToken == "" {
					t, path, err := loadOrMakeTokens(a.dataDir)
					if err != nil {
						return err
					}
					apiToken, adminToken = t.API, t.Admin
					logger.Info("no tokens given: using the ones in " + path)
				}
				cfg := httpapi.Config{MaxUploadBytes: maxUpload, Logger: logger,
					ReadTimeout: readTimeout, WriteTimeout: writeTimeout, IdleTimeout: idleTimeout,
					MaxCalls: maxCalls, MaxClientCalls: maxClientCalls,
					MaxBodyInFlight: maxInflight, MaxClientBodyInFlight: maxClientInflight}
				if a.agents != nil {
					cfg.ExternalAgents = a.agents.External
				}
				if apiToken != "" {
					cfg.APITokens = []string{apiToken}
				}
				if adminToken == "" {
					logger.Warn("no --admin-token: plugin uploads and deletions are refused; give --admin-token (SANDFLOW_ADMIN_TOKEN) to allow them")
				}
				if adminToken != "" {
					cfg.AdminTokens = []string{adminToken}
				}
				if api, err = httpapi.New(h, cfg); err != nil {
					return err
				}
				// The MCP server at /mcp takes the API's tokens as bearer tokens,
				// under the API's admission and body bounds.
				mo := mcpOpts
				mo.Tokens, mo.Logger = append(slices.Clone(cfg.APITokens), cfg.AdminTokens...), logger
				if mcpSrv, err = mcp.New(h, &mo); err != nil {
					return err
				}
				defer mcpSrv.Close()
				mux := http.NewServeMux()
				mux.Handle("/mcp", api.Admit(mcpSrv.Handler()))
				mux.Handle("/", api)
				handler, stopConsole, err := withConsole(h, a.js, mux, api.Sessions(), cfg, logger)
				if err != nil {
					return err
				}
				defer stopConsole(context.Background())
				srv = httpapi.NewHTTPServer(api)
				srv.Handler = withInstance(handler, instance)
				srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
				go func() {
					if err := srv.Serve(httpapi.LimitListener(ln, maxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
						logger.Error("http", "err", err)
					}
				}()
			}
			if ln != nil {
				// Commands that find the directory locked point at this server.
				if err := writeServeInfo(a.dataDir, baseURL, instance); err != nil {
					logger.Warn("writing "+serveInfoFile, "err", err)
				}
				defer os.Remove(filepath.Join(a.dataDir, serveInfoFile))
			}
			logger.Info("serving", "data", a.dataDir, "addr", addrOf(ln), "base", baseURL)

			select {
			case <-ctx.Done():
			case err := <-schedDone:
				return err
			}
			logger.Info("stopping")
			sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
			defer cancel()
			if srv != nil {
				mcpSrv.Close() // ends its streams, so that Shutdown need not wait for them
				if err := srv.Shutdown(sctx); err != nil {
					logger.Warn("http shutdown", "err", err)
				}
				if err := api.Close(sctx); err != nil {
					logger.Warn("stopping runs", "err", err)
				}
			}
			stopSched()
			<-schedDone
			logger.Info("stopped")
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:7310", `address of the HTTP API; "" for the scheduler alone`)
	c.Flags().StringVar(&baseURL, "base-url", "", "the URL clients reach the API at (for webhook and run URLs); default http://ADDR")
	c.Flags().StringVar(&apiToken, "api-token", "", "bearer token for the API (env SANDFLOW_API_TOKEN)")
	c.Flags().StringVar(&adminToken, "admin-token", "", "bearer token for the API and plugin uploads (env SANDFLOW_ADMIN_TOKEN)")
	c.Flags().Int64Var(&maxUpload, "max-upload", 64<<20, "largest plugin module accepted, in bytes")
	c.Flags().IntVar(&snapshots, "snapshots", 0, "snapshot a suspended wazero instance that is not kept parked once its run has this many ops, so its resume restores it instead of replaying (0: 64; -1: never)")
	c.Flags().BoolVar(&commitNotices, "commit-notices", false, "with --store postgres://: tell the other hosts of every commit, and follow theirs, so that event streams and the console of a run another host drives update at each commit, not only when it lets the run go (a NOTIFY per commit; every host should have it)")
	c.Flags().IntVar(&preInit, "preinit", 0, "initialised instances each WebAssembly tool in use keeps ready for starts and resumes by replay (0: none; runs created with it share the guest runtime's initialisation randomness)")
	c.Flags().IntVar(&a.jsWorkers, "js-workers", 0, fmt.Sprintf("JavaScript programs that start at once; as many again that have computed over 1 s run beside them (0: max(4, 2 × CPUs), here %d)", jsprogram.DefaultMaxWorkers()))
	c.Flags().IntVar(&a.jsParked, "js-parked", 0, fmt.Sprintf("suspended JavaScript programs kept live in their workers, one worker each, so that a resume runs only what is new; past it, or past %d MiB of their workers' memory, the least recently parked replays when it resumes (0: %d; -1: none)", jsprogram.DefaultMaxParkedBytes>>20, jsprogram.DefaultMaxParked))
	c.Flags().DurationVar(&readTimeout, "read-timeout", httpapi.DefaultReadTimeout, "how long a client has to send a whole request, headers and body (negative: no limit)")
	c.Flags().DurationVar(&writeTimeout, "write-timeout", httpapi.DefaultWriteTimeout, "how long a response may take to write; a request that waits (?wait=, webhooks) has its wait on top, and event streams have it per write (negative: no limit)")
	c.Flags().DurationVar(&idleTimeout, "idle-timeout", httpapi.DefaultIdleTimeout, "how long a keep-alive connection may sit idle between requests (negative: no limit)")
	c.Flags().IntVar(&maxConns, "max-conns", httpapi.DefaultMaxConns, "most connections open at once; more wait to be accepted (0: no limit)")
	c.Flags().IntVar(&maxCalls, "max-calls", httpapi.DefaultMaxCalls, "most tool calls, answers and deliveries being run at once; past it, 503 with Retry-After")
	c.Flags().IntVar(&maxClientCalls, "max-client-calls", httpapi.DefaultMaxClientCalls, "most of those for one client (remote address); past it, 429 with Retry-After")
	c.Flags().Int64Var(&maxInflight, "max-inflight-bytes", httpapi.DefaultMaxBodyInFlight, "most request body bytes held at once; past it, 503 with Retry-After")
	c.Flags().Int64Var(&maxClientInflight, "max-client-inflight-bytes", httpapi.DefaultMaxClientBodyInFlight, "most request body bytes one client may have in flight (at least one upload); past it, 429 with Retry-After")
	c.Flags().DurationVar(&compileTimeout, "compile-timeout", host.DefaultCompileTimeout, "how long a module may take to compile before the upload (or the first run) is refused")
	c.Flags().IntVar(&maxCompiles, "max-compiles", host.DefaultMaxCompiles, "most modules compiling at once; more wait their turn within their timeout")
	c.Flags().DurationVar(&shutdownWait, "shutdown-wait", 30*time.Second, "how long a shutdown waits for requests and runs to stop")
	mcpFlags(c, &mcpOpts, "mcp-")
	return c
}

// mcpFlags adds the MCP server's options to c, each flag named with
// prefix ("mcp-" on serve, where the MCP server is one of several).
func mcpFlags(c *cobra.Command, o *mcp.Options, prefix string) {
	c.Flags().DurationVar(&o.CallWait, prefix+"call-wait", mcp.DefaultCallWait, "how long an MCP tool call waits in its request for the run to end or ask; past it, the call becomes a task (a client with tasks) or answers with what the run waits on")
	c.Flags().DurationVar(&o.TaskTTL, prefix+"task-ttl", mcp.DefaultTaskTTL, "how long an ended MCP task's result is kept when the client asks for no ttl (the run and its history stay)")
	c.Flags().DurationVar(&o.MaxTaskTTL, prefix+"max-task-ttl", mcp.DefaultMaxTaskTTL, "the longest task ttl a client may ask for")
	c.Flags().IntVar(&o.MaxSessions, prefix+"max-sessions", mcp.DefaultMaxSessions, "most open MCP sessions (2025-11-25); past it, a new one closes the session idle the longest")
}

// defaultBaseURL is the base URL of a server listening on addr: http://ADDR,
// or, for an address that is every interface (0.0.0.0, ::), which no
// client can reach, http://localhost:PORT, with guessed set.
func defaultBaseURL(addr net.Addr) (string, bool) {
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("localhost", strconv.Itoa(ta.Port)), true
	}
	return "http://" + addr.String(), false
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// serveInfoFile says, while serve runs, which process it is and where its
// API is: a command that finds the data directory locked names the API.
const serveInfoFile = "serve.json"

type serveInfo struct {
	PID int    `json:"pid"`
	URL string `json:"url"`
	// Instance is this serve's own random name, which its /healthz
	// answers in the Sandflow-Instance header: a command checks it before
	// it sends a token to the URL (confirmServer), so a serve.json left by
	// a crash, whose pid and port another process now has, is no way to
	// hand that process the tokens.
	Instance string `json:"instance"`
}

// instanceHeader carries a serve's Instance on its /healthz answers.
const instanceHeader = "Sandflow-Instance"

// withInstance answers /healthz with the serve's instance name.
func withInstance(next http.Handler, instance string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Header().Set(instanceHeader, instance)
		}
		next.ServeHTTP(w, r)
	})
}

func writeServeInfo(dir, url, instance string) error {
	b, _ := json.Marshal(serveInfo{PID: os.Getpid(), URL: url, Instance: instance})
	tmp := filepath.Join(dir, serveInfoFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, serveInfoFile))
}

// confirmServer asks the URL serve.json names whether it is that serve:
// its /healthz, without a token, must answer with serve.json's instance
// name.
func confirmServer(si serveInfo) bool {
	if si.Instance == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, si.URL+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.Header.Get(instanceHeader) == si.Instance
}

// runningServer returns the URL of the API of the sandflow serve that has
// dir open, if its serve.json names a live process.
func runningServer(dir string) (serveInfo, bool) {
	var si serveInfo
	b, err := os.ReadFile(filepath.Join(dir, serveInfoFile))
	if err != nil || json.Unmarshal(b, &si) != nil || si.PID <= 0 || si.URL == "" {
		return si, false
	}
	return si, processAlive(si.PID)
}

// lockedError explains a data directory another process holds.
func lockedError(dir string, err error) error {
	if si, ok := runningServer(dir); ok {
		return withCode(exitLocked, fmt.Errorf("%w: sandflow serve (pid %d) has it open; use its HTTP API at %s (see API.md), or stop it", err, si.PID, si.URL))
	}
	return withCode(exitLocked, fmt.Errorf("%w (stop the other sandflow process, or use another --data directory)", err))
}

// loadOrMakeTokens reads the data directory's tokens, making them (random,
// 128 bits each) on first use.
func loadOrMakeTokens(dir string) (tokens, string, error) {
	path := filepath.Join(dir, tokensFile)
	var t tokens
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &t); err != nil || t.API == "" || t.Admin == "" {
			return t, path, fmt.Errorf("%s is not a tokens file: remove it to make new tokens", path)
		}
		return t, path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return t, path, err
	}
	t = tokens{API: "sfa_" + randomHex(16), Admin: "sfk_" + randomHex(16)}
	b, _ := json.MarshalIndent(t, "", "  ")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return t, path, err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return t, path, err
	}
	return t, path, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
