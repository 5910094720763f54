package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/mcp"
	"github.com/sandflow/sandflow/store"
)

func mcpCmd(a *app) *cobra.Command {
	var url, token, sess string
	var opts mcp.Options
	c := &cobra.Command{
		Use:   "mcp [--url URL --token TOKEN]",
		Short: "Serve the tools to an MCP client on stdin and stdout",
		Long: `Mcp speaks the Model Context Protocol on stdin and stdout, for desktop
clients that start their servers as commands.

It opens the data directory and runs the scheduler itself. When another
sandflow process has the directory open (sandflow serve), it talks to that
server instead: at the /mcp of the URL serve keeps in serve.json (or
--url), with the API token of --token, SANDFLOW_API_TOKEN, or the data
directory's tokens.json. With --url it always talks to that server; the
server's own MCP options then apply (serve --mcp-call-wait, ...).`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			in, out := cmd.InOrStdin(), cmd.OutOrStdout()
			if token == "" {
				token = os.Getenv("SANDFLOW_API_TOKEN")
			}
			if token == "" {
				if t, _, err := loadTokensIfAny(a.dataDir); err == nil {
					token = t.API
				}
			}
			if url != "" {
				return proxyMCP(ctx, in, out, url, token)
			}
			h, err := a.open(ctx)
			if errors.Is(err, store.ErrLocked) {
				si, ok := runningServer(a.dataDir)
				if !ok || !confirmServer(si) {
					return lockedError(a.dataDir, err)
				}
				return proxyMCP(ctx, in, out, si.URL+"/mcp", token)
			}
			if err != nil {
				return err
			}
			defer a.closeEngines()
			defer h.Close(context.Background())
			opts.StdioSession = sess
			return serveMCP(ctx, h, in, out, &opts, a.errOut)
		},
	}
	c.Flags().StringVar(&url, "url", "", "talk to the sandflow server at this /mcp URL instead of opening the data directory")
	c.Flags().StringVar(&token, "token", "", "API token for --url (env SANDFLOW_API_TOKEN)")
	c.Flags().StringVar(&sess, "session", "stdio", "the sandflow session the client's calls belong to")
	mcpFlags(c, &opts, "")
	return c
}

// serveMCP serves one client on a host until it closes its input or ctx
// ends, with the scheduler running for the runs' timers and retries.
func serveMCP(ctx context.Context, h *host.Host, in io.Reader, out io.Writer, o *mcp.Options, errOut io.Writer) error {
	logger := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	schedCtx, stopSched := context.WithCancel(context.Background())
	schedDone := make(chan error, 1)
	go func() { schedDone <- h.RunScheduler(schedCtx, logger) }()
	defer func() {
		stopSched()
		<-schedDone
	}()
	mo := *o
	mo.Logger = logger
	s, err := mcp.New(h, &mo)
	if err != nil {
		return err
	}
	defer s.Close()
	err = s.ServeStdio(ctx, &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopCloser{out}})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, sdk.ErrConnectionClosed) {
		return nil
	}
	return err
}

// proxyMCP carries messages between stdio and a running server's /mcp.
func proxyMCP(ctx context.Context, in io.Reader, out io.Writer, url, token string) error {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return withCode(exitUsage, fmt.Errorf("--url %q: want an http:// or https:// URL of a server's /mcp", url))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	local, err := (&sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopCloser{out}}).Connect(ctx)
	if err != nil {
		return err
	}
	defer local.Close()
	remote, err := (&sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withBearer{token}}}).Connect(ctx)
	if err != nil {
		return err
	}
	defer remote.Close()
	errs := make(chan error, 2)
	pump := func(from, to sdk.Connection) {
		for {
			m, err := from.Read(ctx)
			if err == nil {
				err = to.Write(ctx, m)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}
	go pump(local, remote)
	go pump(remote, local)
	err = <-errs
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, sdk.ErrConnectionClosed) {
		return nil
	}
	return fmt.Errorf("mcp at %s: %w", url, err)
}

type withBearer struct{ token string }

func (b withBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// loadTokensIfAny reads the data directory's tokens without making them.
func loadTokensIfAny(dir string) (tokens, string, error) {
	if _, err := os.Stat(filepath.Join(dir, tokensFile)); err != nil {
		return tokens{}, "", err
	}
	return loadOrMakeTokens(dir)
}
