package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// errNoServer is returned by remoteGet when no running server can answer
// for the data directory (none runs, or no API token is known).
var errNoServer = errors.New("no running sandflow serve with a known API token")

// remoteGet reads path from the API of the sandflow serve that holds the
// data directory, with the API token of SANDFLOW_API_TOKEN or of the
// directory's tokens.json, and decodes the JSON answer into out.
func (a *app) remoteGet(ctx context.Context, path string, out any) error {
	si, ok := runningServer(a.dataDir)
	if !ok {
		return errNoServer
	}
	token := os.Getenv("SANDFLOW_API_TOKEN")
	if token == "" {
		var t tokens
		if b, err := os.ReadFile(filepath.Join(a.dataDir, tokensFile)); err == nil && json.Unmarshal(b, &t) == nil {
			token = t.API
		}
	}
	if token == "" {
		return errNoServer
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, si.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the API of sandflow serve at %s: %w", si.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		err := fmt.Errorf("GET %s: %s: %s", path, resp.Status, e.Error.Message)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return withCode(exitNotFound, err)
		case http.StatusBadRequest:
			return withCode(exitInvalid, err)
		}
		return err
	}
	fmt.Fprintf(a.errOut, "(read through the API of sandflow serve at %s, which holds %s)\n", si.URL, a.dataDir)
	return json.Unmarshal(body, out)
}

// readOrRemote runs a read-only command on the data directory, or, when a
// running sandflow serve holds it, through that server's API.
func (a *app) readOrRemote(ctx context.Context, local func(h *host.Host) error, remote func() error) error {
	err := a.withHostRO(ctx, local)
	if !errors.Is(err, store.ErrLocked) {
		return err
	}
	if rerr := remote(); !errors.Is(rerr, errNoServer) {
		return rerr
	}
	return err
}
