package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// buildSandflow builds the sandflow command of the repository at root into
// dir. cgo is off: the harness uses the default engine, wazero, and a cgo
// build links wasmtime for minutes.
func buildSandflow(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "sandflow")
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "./cmd/sandflow")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building sandflow: %v\n%s", err, stderr.String())
	}
	return bin, nil
}

func goTool() string {
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "go"
}

// server is sandflow serve on one data directory and address, started
// again after each kill.
type server struct {
	bin, data, agents, addr string
	apiToken, adminToken    string
	logPath                 string

	mu     sync.Mutex // guards cmd, exited and gen
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's error once it exits
	gen    int        // how many times it was started
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start starts serve and waits until its API answers.
func (s *server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.gen++
	gen := s.gen
	fmt.Fprintf(logf, "---- chaos: server %d starts at %s\n", gen, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, "--data", s.data, "--agents", s.agents, "serve", "--addr", s.addr,
		"--api-token", s.apiToken, "--admin-token", s.adminToken, "--shutdown-wait", "10s")
	cmd.Stdout, cmd.Stderr = logf, logf
	inGroup(cmd)
	err = cmd.Start()
	logf.Close()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("starting serve: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.addr+"/v1/tools", nil)
		req.Header.Set("Authorization", "Bearer "+s.apiToken)
		if resp, err := c.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("serve %d exited before it served: %v (see its log)", gen, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve %d did not answer within a minute", gen)
		}
	}
}

// generation is the number of the server process now serving.
func (s *server) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// kill sends SIGKILL to serve's process group and waits until the address
// is free again.
func (s *server) kill() error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if err := killGroup(cmd); err != nil {
		return fmt.Errorf("killing serve: %w", err)
	}
	return s.waitGone(10 * time.Second)
}

// signalKill sends SIGKILL to serve's process group and returns at once.
func (s *server) signalKill() error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if err := killGroup(cmd); err != nil {
		return fmt.Errorf("killing serve: %w", err)
	}
	return nil
}

// stop stops serve gracefully (SIGTERM) and waits for it to exit.
func (s *server) stop() error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if err := terminate(cmd); err != nil {
		return fmt.Errorf("stopping serve: %w", err)
	}
	if err := s.waitGone(30 * time.Second); err != nil {
		killGroup(cmd)
		return err
	}
	return nil
}

// waitGone waits until serve's process has exited and its address takes
// a listener again.
func (s *server) waitGone(limit time.Duration) error {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	timeout := time.After(limit)
	select {
	case <-exited:
	case <-timeout:
		return fmt.Errorf("serve did not exit within %s", limit)
	}
	for {
		if ln, err := net.Listen("tcp", s.addr); err == nil {
			ln.Close()
			return nil
		}
		select {
		case <-timeout:
			return fmt.Errorf("the address %s was not free within %s", s.addr, limit)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cli runs the sandflow command on the data directory (the server must be
// stopped) and returns its standard output, standard error and exit code.
func (s *server) cli(ctx context.Context, args ...string) (stdout, stderr []byte, code int, err error) {
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"--data", s.data, "--agents", s.agents}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.Bytes(), e.Bytes(), ee.ExitCode(), nil
	}
	return o.Bytes(), e.Bytes(), 0, err
}

// api is a client of the server's HTTP API.
type api struct {
	base  string
	token string
	c     *http.Client
}

// errNoAnswer is returned when a request got no HTTP answer (the server
// was down, or died while it was being served): its outcome is unknown.
var errNoAnswer = errors.New("no answer from the server")

// do sends a request and decodes a JSON answer into out (when not nil).
// A request without an answer returns an error wrapping errNoAnswer.
func (a *api) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	return a.doURL(ctx, method, a.base+path, a.token, body, out)
}

func (a *api) doURL(ctx context.Context, method, url, token string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %s: %v", errNoAnswer, method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("%w: %s %s: reading the answer: %v", errNoAnswer, method, url, err)
	}
	if out != nil && resp.StatusCode/100 == 2 && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding %q: %w", method, url, truncate(b), err)
		}
	}
	return resp.StatusCode, nil
}

func truncate(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
