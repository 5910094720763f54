package host_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// Script guests for the serve tests (serve_test.go): receive and reply
// ops, SendCall, RunInfo's calls, and histories with call_received,
// receive and replied events.
//
// The guests here are Go functions run by a fake source engine (no
// WebAssembly): each activation runs the function from the top against
// the host's op handler, awaiting with the block flag as the rawabi guest
// does, so every activation replays the run.

// scriptGuest is a guest body: it issues ops through g and ends with
// g.complete.
type scriptGuest func(g *sg)

type scriptEngine struct {
	mu      sync.Mutex
	scripts map[string]scriptGuest
}

const scriptEngineName = "scriptguest"

func newScriptEngine(scripts map[string]scriptGuest) *scriptEngine {
	return &scriptEngine{scripts: scripts}
}

func (e *scriptEngine) Name() string { return scriptEngineName + "/v1" }

func (e *scriptEngine) Compile(ctx context.Context, module []byte) (host.CompiledModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn := e.scripts[string(module)]
	if fn == nil {
		return nil, &host.PluginError{Reason: "bad_program", Detail: "no script " + string(module)}
	}
	return scriptModule{fn}, nil
}

func (e *scriptEngine) Close(context.Context) error { return nil }

func (e *scriptEngine) Check(context.Context, host.CompiledModule, host.Manifest, host.Limits) error {
	return nil
}

type scriptModule struct{ fn scriptGuest }

func (m scriptModule) Instantiate(ctx context.Context, cfg host.InstanceConfig) (host.Instance, error) {
	return &scriptInstance{fn: m.fn, ops: cfg.Ops}, nil
}

func (m scriptModule) Close(context.Context) error { return nil }

type scriptInstance struct {
	fn  scriptGuest
	ops host.OpHandler
}

// sgStop unwinds a guest body when the host ends the instance.
type sgStop struct{ err error }

func (i *scriptInstance) Call(ctx context.Context, export string) (res int32, err error) {
	switch export {
	case abi.VersionExport:
		return abi.Version, nil
	case abi.RunExport:
		defer func() {
			if p := recover(); p != nil {
				s, ok := p.(sgStop)
				if !ok {
					panic(p)
				}
				res, err = 0, s.err
			}
		}()
		i.fn(&sg{ctx: ctx, ops: i.ops})
		return abi.RunDone, nil
	}
	return 0, &host.GuestError{Message: "no export " + export}
}

func (i *scriptInstance) Close(context.Context) error { return nil }

// sg is what a guest body issues ops with.
type sg struct {
	ctx context.Context
	ops host.OpHandler

	received int // one past the highest call index received
}

type opAnswer struct {
	st      abi.Status
	future  uint32
	payload []byte
}

func (g *sg) op(kind abi.OpKind, name string, payload []byte) opAnswer {
	b, err := g.ops.Op(g.ctx, kind, []byte(name), payload)
	if err != nil {
		panic(sgStop{err})
	}
	return opAnswer{abi.Status(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]), append([]byte(nil), b[abi.BodyHeaderSize:]...)}
}

// await blocks until future f settles and returns its value (the guest
// ends if it rejected).
func (g *sg) await(f uint32) []byte {
	req := binary.LittleEndian.AppendUint32(nil, uint32(abi.AwaitAll|abi.AwaitBlock))
	req = binary.LittleEndian.AppendUint32(req, f)
	a := g.op(abi.OpAwait, "", req)
	if a.st != abi.StatusOK || len(a.payload) < 12 {
		panic(sgStop{&host.GuestError{Message: fmt.Sprintf("await answered %d", a.st)}})
	}
	if abi.FutureState(binary.LittleEndian.Uint32(a.payload[4:])) != abi.FutureFulfilled {
		panic(sgStop{&host.GuestError{Message: "future rejected: " + string(a.payload[12:])}})
	}
	return a.payload[12 : 12+binary.LittleEndian.Uint32(a.payload[8:])]
}

// value is an op's value: at once, or by a blocking await.
func (g *sg) value(a opAnswer) []byte {
	switch a.st {
	case abi.StatusOK:
		return a.payload
	case abi.StatusPending:
		return g.await(a.future)
	}
	panic(sgStop{&host.GuestError{Message: fmt.Sprintf("op answered %d: %s", a.st, a.payload)}})
}

func (g *sg) receive() abi.ServeCall {
	var c abi.ServeCall
	if err := json.Unmarshal(g.value(g.op(abi.OpReceive, "", nil)), &c); err != nil {
		panic(err)
	}
	g.received = max(g.received, c.Index+1)
	return c
}

func (g *sg) reply(v any) int {
	out, _ := json.Marshal(v)
	b, _ := json.Marshal(abi.ReplyRequest{Received: g.received, Output: out})
	a := g.op(abi.OpReply, "", b)
	if a.st != abi.StatusOK {
		panic(sgStop{&host.GuestError{Message: "reply refused: " + string(a.payload)}})
	}
	var r abi.ReplyResult
	_ = json.Unmarshal(a.payload, &r)
	return r.Answered
}

func (g *sg) complete(v any) {
	b, _ := json.Marshal(v)
	out, _ := json.Marshal(abi.Outcome{Result: b})
	g.op(abi.OpComplete, "", out)
}

func (g *sg) sleep(ms int64) opAnswer {
	b, _ := json.Marshal(abi.SleepRequest{Ms: &ms})
	return g.op(abi.OpSleep, "", b)
}

// scriptFixture is a host whose tools are script guests.
type scriptFixture struct {
	*fixture
	eng *scriptEngine
}

func newScriptFixture(t *testing.T, opts *host.Options, scripts map[string]scriptGuest) *scriptFixture {
	t.Helper()
	eng := newScriptEngine(scripts)
	var o host.Options
	if opts != nil {
		o = *opts
	}
	o.Engines = map[string]host.Engine{scriptEngineName: eng}
	return &scriptFixture{fixture: newFixture(t, &o), eng: eng}
}

func (f *scriptFixture) addScript(name, entry string) {
	f.t.Helper()
	m := host.Manifest{Name: name, Description: "a script guest", Entry: entry, Engine: scriptEngineName,
		InputSchema: json.RawMessage(`{"type":"object"}`)}
	if _, err := f.h.AddPlugin(context.Background(), []byte(name), m); err != nil {
		f.t.Fatal(err)
	}
}

func (f *scriptFixture) exportHistory(id string) *host.History {
	f.t.Helper()
	var buf strings.Builder
	if err := f.h.ExportHistory(context.Background(), id, &buf); err != nil {
		f.t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		f.t.Fatal(err)
	}
	return hist
}

// echoServe answers each call with its input, forever.
func echoServe(g *sg) {
	for {
		c := g.receive()
		g.reply(json.RawMessage(c.Input))
	}
}
