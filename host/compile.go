package host

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Compilation runs under a budget: a module's structure is checked first
// (wasmparse's limits, in checkModule), and then it compiles on a
// goroutine of its own, at most Options.MaxCompiles at once, while the
// caller waits at most Options.CompileTimeout, or until its context ends.
// An engine's compile cannot be interrupted (wazero's does not look at
// its context), so one the caller gave up on runs to its end on that
// goroutine, holding its place among the MaxCompiles: abandoned compiles
// cannot pile up past the bound. Its result is then closed, not cached.

const (
	// DefaultCompileTimeout is Options.CompileTimeout's default.
	DefaultCompileTimeout = time.Minute
	// DefaultMaxCompiles is Options.MaxCompiles's default.
	DefaultMaxCompiles = 2
)

// compile compiles a module on an engine, once per engine and hash.
func (h *Host) compile(ctx context.Context, eng Engine, hash string, wasm []byte) (CompiledModule, error) {
	key := engineKind(eng) + ":" + hash
	h.mu.Lock()
	cm := h.compiled[key]
	h.mu.Unlock()
	if cm != nil {
		return cm, nil
	}
	cm, err := h.compileBounded(ctx, eng, wasm)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev := h.compiled[key]; prev != nil {
		cm.Close(ctx)
		return prev, nil
	}
	h.compiled[key] = cm
	return cm, nil
}

// compileBounded runs eng.Compile within the host's budget.
func (h *Host) compileBounded(ctx context.Context, eng Engine, wasm []byte) (CompiledModule, error) {
	timeout := h.opts.CompileTimeout
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	timedOut := func() error {
		if ctx.Err() != nil {
			return ctx.Err() // the caller went away
		}
		return &PluginError{Reason: "compile_timeout", Detail: fmt.Sprintf("the module did not compile within %s", timeout), Err: context.DeadlineExceeded}
	}
	select {
	case h.compiles <- struct{}{}:
	case <-tctx.Done():
		return nil, timedOut()
	}
	type result struct {
		cm  CompiledModule
		err error
	}
	// Unbuffered: the goroutine hands its result over, or, once the
	// caller has given up, closes it itself.
	done := make(chan result)
	abandoned := make(chan struct{})
	go func() {
		defer func() { <-h.compiles }()
		cm, err := eng.Compile(tctx, wasm)
		select {
		case done <- result{cm, err}:
		case <-abandoned:
			if cm != nil {
				cm.Close(context.Background())
			}
		}
	}()
	select {
	case res := <-done:
		if res.err != nil && tctx.Err() != nil && !errors.Is(res.err, ErrBadPlugin) {
			return nil, timedOut() // an engine that honours its context stopped
		}
		return res.cm, res.err
	case <-tctx.Done():
		close(abandoned)
		return nil, timedOut()
	}
}

// CompileTimeout is how long one compilation may take (Options): a server
// gives an upload that long on top of its write deadline.
func (h *Host) CompileTimeout() time.Duration { return h.opts.CompileTimeout }
