package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// The tests in this file keep abi/HISTORY.md, the documented schema of
// the event log, true to the code: every event kind the host defines has
// a section there, every field of an event's data is in a kind's table,
// and every field the host writes on a kind of event (in the golden
// histories, and in the events of small runs that make every kind) is
// listed under that kind.

const historyDoc = "../abi/HISTORY.md"

// docSection is one event kind's section of the history document.
type docSection struct {
	fields map[string]string // JSON name -> the presence column
	order  []string
	// examples are the section's JSON examples of the event's data.
	examples []string
}

// readHistoryDoc parses the "Event kinds" part of the history document:
// a "### `kind`" heading per kind, a table of its fields whose first
// column is the field's JSON name in backquotes and whose third says
// when it is present, and ```json examples.
func readHistoryDoc(t *testing.T) map[string]*docSection {
	t.Helper()
	raw, err := os.ReadFile(historyDoc)
	if err != nil {
		t.Fatal(err)
	}
	secs := map[string]*docSection{}
	var cur *docSection
	inKinds, inJSON := false, false
	var example strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inJSON:
			if strings.HasPrefix(line, "```") {
				inJSON = false
				if cur != nil {
					cur.examples = append(cur.examples, example.String())
				}
				continue
			}
			example.WriteString(line)
			example.WriteByte('\n')
		case strings.HasPrefix(line, "## "):
			inKinds, cur = strings.TrimSpace(line[3:]) == "Event kinds", nil
		case !inKinds:
		case strings.HasPrefix(line, "### "):
			h := strings.TrimSpace(line[4:])
			if !strings.HasPrefix(h, "`") || !strings.HasSuffix(h, "`") {
				t.Fatalf("%s: heading %q under Event kinds is not a kind in backquotes", historyDoc, h)
			}
			kind := strings.Trim(h, "`")
			if secs[kind] != nil {
				t.Fatalf("%s: two sections for %s", historyDoc, kind)
			}
			cur = &docSection{fields: map[string]string{}}
			secs[kind] = cur
		case cur == nil:
		case strings.HasPrefix(line, "```json"):
			inJSON = true
			example.Reset()
		case strings.HasPrefix(line, "| `"):
			cols := strings.Split(strings.Trim(line, "|"), "|")
			if len(cols) < 4 {
				t.Fatalf("%s: field row %q has %d columns, want name, type, presence, meaning", historyDoc, line, len(cols))
			}
			name := strings.Trim(strings.TrimSpace(cols[0]), "`")
			cur.fields[name] = strings.TrimSpace(cols[2])
			cur.order = append(cur.order, name)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return secs
}

// eventKinds returns the Kind* constants of history/events.go, by parsing it: every
// kind the host defines, whoever added it.
func eventKinds(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("history", "events.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{} // kind -> constant
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Kind") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("history/events.go: %s is not a string literal", n.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				kinds[v] = n.Name
			}
		}
	}
	if len(kinds) == 0 {
		t.Fatal("history/events.go: no Kind* constants")
	}
	return kinds
}

// evDataFields returns the JSON names of history.Data's fields, from its tags.
func evDataFields(t *testing.T) map[string]reflect.StructField {
	t.Helper()
	out := map[string]reflect.StructField{}
	rt := reflect.TypeFor[history.Data]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("history.Data.%s has no JSON name", f.Name)
		}
		out[name] = f
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestHistoryDocHasEveryKindAndField checks the history document against
// the code alone: a section per event kind and none for a kind the host
// does not have, and every field of history.Data in some kind's table, each
// table naming only fields history.Data has.
func TestHistoryDocHasEveryKindAndField(t *testing.T) {
	secs := readHistoryDoc(t)
	kinds := eventKinds(t)
	fields := evDataFields(t)
	for _, k := range sortedKeys(kinds) {
		if secs[k] == nil {
			t.Errorf("%s (%s) has no section in %s", k, kinds[k], historyDoc)
		}
	}
	documented := map[string]bool{}
	for _, k := range sortedKeys(secs) {
		if _, ok := kinds[k]; !ok {
			t.Errorf("%s has a section for %q, which is no event kind of history/events.go", historyDoc, k)
		}
		for _, f := range secs[k].order {
			documented[f] = true
			if _, ok := fields[f]; !ok {
				t.Errorf("%s: %s lists field %q, which history.Data does not have", historyDoc, k, f)
			}
		}
		if len(secs[k].examples) == 0 {
			t.Errorf("%s: %s has no example", historyDoc, k)
		}
		for _, ex := range secs[k].examples {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(ex), &m); err != nil {
				t.Errorf("%s: %s's example is not a JSON object: %v", historyDoc, k, err)
				continue
			}
			for _, f := range sortedKeys(m) {
				if _, ok := secs[k].fields[f]; !ok {
					t.Errorf("%s: %s's example has field %q, which its table does not list", historyDoc, k, f)
				}
			}
			if err := decodeEvStrict([]byte(ex)); err != nil {
				t.Errorf("%s: %s's example does not decode as event data: %v", historyDoc, k, err)
			}
		}
	}
	for _, f := range sortedKeys(fields) {
		if !documented[f] {
			t.Errorf("history.Data field %s (json %q) is in no kind's table in %s", fields[f].Name, f, historyDoc)
		}
	}
}

// decodeEvStrict decodes event data into history.Data, refusing fields it does
// not have.
func decodeEvStrict(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d history.Data
	return dec.Decode(&d)
}

// TestHistoryDocListsWhatEventsCarry checks the history document against
// events the host wrote: those of the golden histories, and those of
// small runs (docRuns) that between them make every kind of event. Every
// kind must occur; every field an event carries must be in its kind's
// table; and a field the table says is always present must be on every
// event of the kind.
func TestHistoryDocListsWhatEventsCarry(t *testing.T) {
	secs := readHistoryDoc(t)
	kinds := eventKinds(t)
	var evs []store.Event
	golden, err := filepath.Glob("testdata/histories/*.json")
	if err != nil || len(golden) == 0 {
		t.Fatalf("no golden histories: %v", err)
	}
	for _, p := range golden {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := ReadHistory(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, e := range hist.Events {
			evs = append(evs, store.Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Data: e.Data})
		}
	}
	evs = append(evs, docRuns(t)...)
	seen := map[string]int{}
	carried := map[string]bool{} // kind.field
	for _, e := range evs {
		seen[e.Kind]++
		var m map[string]json.RawMessage
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatalf("event %d (%s): data %s is not a JSON object: %v", e.Seq, e.Kind, e.Data, err)
		}
		if err := decodeEvStrict(e.Data); err != nil {
			t.Errorf("event %d (%s): data %s: %v", e.Seq, e.Kind, e.Data, err)
		}
		sec := secs[e.Kind]
		if sec == nil {
			continue // reported by TestHistoryDocHasEveryKindAndField
		}
		for _, f := range sortedKeys(m) {
			carried[e.Kind+"."+f] = true
			if _, ok := sec.fields[f]; !ok {
				t.Errorf("a %s event carries %q, which its section in %s does not list: %s", e.Kind, f, historyDoc, e.Data)
			}
		}
		for _, f := range sec.order {
			if _, ok := m[f]; !ok && strings.HasPrefix(sec.fields[f], "always") {
				t.Errorf("%s says %s's %q is always present; a %s event lacks it: %s", historyDoc, e.Kind, f, e.Kind, e.Data)
			}
		}
	}
	var unseen []string
	for _, k := range sortedKeys(kinds) {
		if seen[k] == 0 {
			t.Errorf("no event of kind %s (%s): make one in docRuns, so that what it carries is checked", k, kinds[k])
			continue
		}
		for _, f := range secs[k].order {
			if !carried[k+"."+f] {
				unseen = append(unseen, k+"."+f)
			}
		}
	}
	// Fields these runs do not make (a shared initialisation needs a
	// WebAssembly engine, say) are checked against history.Data only.
	t.Logf("documented fields no event here carries: %v", unseen)
	if path := os.Getenv("SANDFLOW_HISTORYDOC_DUMP"); path != "" {
		// Examples for the document, from real events.
		var b bytes.Buffer
		for _, e := range evs {
			fmt.Fprintf(&b, "%s\t%s\n", e.Kind, e.Data)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadHistoryIgnoresUnknownFieldsRefusesUnknownKinds checks what
// abi/HISTORY.md says of reading: a member the host does not know (in
// data, the envelope or the file) is ignored, a kind it does not know
// makes the history bad, and so does a format version other than 1.
func TestReadHistoryIgnoresUnknownFieldsRefusesUnknownKinds(t *testing.T) {
	created := `{"tool":"t","plugin":"t","version":1,"moduleHash":"00","input":{},"seed":"` + strings.Repeat("5a", 32) + `","fromTheFuture":[1,{"x":2}]}`
	hist := func(kind2, data2 string) string {
		return `{"format":"sandflow.history","version":1,"futureMember":true,` +
			`"run":{"id":"run_doc","tool":"t","plugin":"t","version":1,"moduleHash":"00","status":"running","lastSeq":3},` +
			`"events":[{"seq":1,"time":"2026-12-01T00:00:00Z","kind":"run_created","data":` + created + `},` +
			`{"seq":2,"time":"2026-12-01T00:00:00Z","kind":"run_resumed","data":{"later":"x"}},` +
			`{"seq":3,"time":"2026-12-01T00:00:01Z","kind":"` + kind2 + `","data":` + data2 + `}]}`
	}
	h, err := ReadHistory(strings.NewReader(hist(EvProgress, `{"op":1,"value":{"n":1},"op2":7}`)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := historyState(h)
	if err != nil {
		t.Fatalf("a history with unknown fields: %v", err)
	}
	if string(rs.LastProgress) != `{"n":1}` || rs.Created.Tool != "t" {
		t.Fatalf("the known fields were not read: progress %s, tool %q", rs.LastProgress, rs.Created.Tool)
	}
	h, err = ReadHistory(strings.NewReader(hist("future_kind", `{"op":1}`)))
	if err != nil {
		t.Fatal(err) // the file is read; its events are checked by state
	}
	if _, err := historyState(h); !errors.Is(err, ErrBadHistory) {
		t.Fatalf("a history with an unknown kind: %v, want ErrBadHistory", err)
	}
	bad := strings.Replace(hist(EvProgress, `{"op":1}`), `"version":1,"futureMember"`, `"version":2,"futureMember"`, 1)
	if _, err := ReadHistory(strings.NewReader(bad)); !errors.Is(err, ErrBadHistory) {
		t.Fatalf("a history of version 2: %v, want ErrBadHistory", err)
	}
}

// --- small runs that make every kind of event ---

// docEngine is a SourceEngine whose modules name Go functions (docBodies,
// docSteps) that act as guests: they issue ops through the host's handler
// as abi/README.md says, and await with the block flag, so that every
// activation replays in a fresh instance (as a blocking guest does).
type docEngine struct{}

func (docEngine) Name() string                                                  { return "docguest/1" }
func (docEngine) Close(context.Context) error                                   { return nil }
func (docEngine) Check(context.Context, CompiledModule, Manifest, Limits) error { return nil }

func (docEngine) Compile(_ context.Context, module []byte) (CompiledModule, error) {
	name, _, _ := strings.Cut(string(module), "#") // "#n" makes another module of the same body
	body := docBodies[name]
	if body == nil {
		return nil, &PluginError{Reason: "bad_program", Detail: "no doc body " + name}
	}
	return docModule{body: body}, nil
}

type docModule struct{ body func(*docGuest) }

func (m docModule) Close(context.Context) error { return nil }
func (m docModule) Instantiate(_ context.Context, cfg InstanceConfig) (Instance, error) {
	return &docInstance{body: m.body, cfg: cfg}, nil
}

type docInstance struct {
	body func(*docGuest)
	cfg  InstanceConfig
}

func (i *docInstance) Close(context.Context) error { return nil }

// docStop unwinds a guest whose op the host ended the instance at.
type docStop struct{ err error }

func (i *docInstance) Call(ctx context.Context, export string) (res int32, err error) {
	g := &docGuest{ctx: ctx, ops: i.cfg.Ops, stdout: i.cfg.Stdout, stderr: i.cfg.Stderr}
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(docStop)
			if !ok {
				panic(r)
			}
			res, err = 0, s.err
		}
	}()
	switch export {
	case abi.VersionExport:
		return abi.Version, nil
	case abi.RunExport:
		i.body(g)
		return abi.RunDone, nil
	case abi.StepExport:
		_, _, b := g.op(abi.OpStepInput, "", nil)
		var in abi.StepInput
		if err := json.Unmarshal(b, &in); err != nil {
			return 0, err
		}
		fmt.Fprintf(g.stdout, "attempt %d of %s\n", in.Attempt, in.Name)
		out := docSteps[in.Name](in)
		g.op(abi.OpStepComplete, "", out)
		return abi.RunDone, nil
	}
	return 0, &GuestError{Message: "no export " + export}
}

type docGuest struct {
	ctx            context.Context
	ops            OpHandler
	stdout, stderr io.Writer
}

// op issues an op; payload is JSON-encoded unless it is nil or []byte.
func (g *docGuest) op(kind abi.OpKind, name string, payload any) (abi.Status, uint32, []byte) {
	var p []byte
	switch v := payload.(type) {
	case nil:
	case []byte:
		p = v
	case string:
		p = []byte(v)
	default:
		p = mustJSON(v)
	}
	body, err := g.ops.Op(g.ctx, kind, []byte(name), p)
	if err != nil {
		panic(docStop{err})
	}
	st, fut := abi.Status(binary.LittleEndian.Uint32(body)), binary.LittleEndian.Uint32(body[4:])
	return st, fut, slices.Clone(body[8:])
}

// wait issues an op that makes a future and awaits it, returning the
// future's value (a rejection's error object).
func (g *docGuest) wait(kind abi.OpKind, name string, payload any) []byte {
	st, fut, b := g.op(kind, name, payload)
	switch st {
	case abi.StatusOK, abi.StatusRejected:
		return b
	case abi.StatusPending:
	default:
		panic(docStop{fmt.Errorf("doc guest: %s answered %d: %s", kind, st, b)})
	}
	aw := binary.LittleEndian.AppendUint32(nil, uint32(abi.AwaitAll|abi.AwaitBlock))
	aw = binary.LittleEndian.AppendUint32(aw, fut)
	st, _, b = g.op(abi.OpAwait, "", aw)
	if st != abi.StatusOK || len(b) < 12 {
		panic(docStop{fmt.Errorf("doc guest: await answered %d", st)})
	}
	n := binary.LittleEndian.Uint32(b[8:])
	return b[12 : 12+n]
}

func (g *docGuest) complete(out abi.Outcome) { g.op(abi.OpComplete, "", out) }

const docHookToken = "doc-hook"

var docBodies = map[string]func(*docGuest){
	// everything: most op kinds, each waited on in turn.
	"everything": func(g *docGuest) {
		g.op(abi.OpProgress, "", map[string]string{"stage": "planning"})
		fmt.Fprintln(g.stdout, "planning")
		g.wait(abi.OpStep, "plan", json.RawMessage(`{"input":{"service":"api"},"retry":{"maxAttempts":2,"initialBackoffMs":1}}`))
		g.wait(abi.OpSleep, "", `{"ms":0}`)
		g.wait(abi.OpSleep, "", `{"ms":1000}`)
		g.wait(abi.OpAsk, "", `{"prompt":"Deploy api?","options":[{"id":"approve","label":"Deploy"},{"id":"cancel","label":"Cancel"}]}`)
		g.op(abi.OpAsk, "", `{"prompt":""}`) // refused
		g.op(abi.OpHookCreate, "", `{"token":"`+docHookToken+`","metadata":{"purpose":"approval"}}`)
		g.op(abi.OpHookCreate, "", `{"token":"`+docHookToken+`"}`) // held by the first: a conflict
		g.wait(abi.OpHookNext, "", `{"hook":7}`)
		g.wait(abi.OpHookNext, "", `{"hook":7}`)
		g.op(abi.OpHookDispose, "", `{"hook":7}`)
		g.op(abi.OpHookCreate, "", `{"webhook":{"manual":true}}`)
		for i := range 2 {
			g.wait(abi.OpHookNext, "", `{"hook":12}`)
			g.op(abi.OpWebhookRespond, "", fmt.Sprintf(`{"hook":12,"request":%d,"status":201,"headers":{"Content-Type":"text/plain"},"body":"thanks"}`, i))
		}
		g.op(abi.OpHookCreate, "", `{"webhook":{"respondWith":{"status":200,"body":"ok"}}}`)
		g.wait(abi.OpAgent, "reviewer", `{"message":"Review the plan","outputSchema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]},"session":"review","model":{"model":"small"}}`)
		g.complete(abi.Outcome{Result: json.RawMessage(`{"deployed":true}`)})
	},
	// noask: a question nobody can answer, and a result taken from progress.
	"noask": func(g *docGuest) {
		g.wait(abi.OpAsk, "", `{"prompt":"Anyone there?","display":"text"}`)
		g.op(abi.OpProgress, "", `{"done":1}`)
		g.op(abi.OpStep, "plan", `{"input":1,"retries":3}`) // refused: no such field
		g.complete(abi.Outcome{})
	},
	// unwind: waits for an abort, and ends with an error.
	"unwind": func(g *docGuest) {
		g.wait(abi.OpSignal, "", nil)
		g.complete(abi.Outcome{Error: &abi.ErrorObject{Type: "AbortedError", Message: "stopped before the deploy"}})
	},
	"fail": func(g *docGuest) {
		g.complete(abi.Outcome{Error: &abi.ErrorObject{Type: "QuotaError", Message: "over quota", Retryable: true}})
	},
	// schema: a result its tool's outputSchema refuses.
	"schema": func(g *docGuest) {
		g.complete(abi.Outcome{Result: json.RawMessage(`{"deployed":"yes"}`)})
	},
	// trap: the guest breaks, having written to stderr.
	"trap": func(g *docGuest) {
		fmt.Fprintln(g.stderr, "panic: index out of range")
		panic(docStop{&GuestError{Message: "guest trapped: unreachable"}})
	},
	// chatty: writes past its output limit.
	"chatty": func(g *docGuest) {
		fmt.Fprint(g.stdout, "0123456789abcdefghijklmnopqrstuvwxyz")
		g.complete(abi.Outcome{})
	},
	// serve: takes a second call, replies, waits for an abort and ends.
	"serve": func(g *docGuest) {
		g.wait(abi.OpReceive, "", nil)
		g.op(abi.OpReply, "", `{"received":1,"output":{"plan":"v1"}}`)
		g.wait(abi.OpReceive, "", nil)
		g.op(abi.OpReply, "", `{"received":2,"output":{"plan":"v2"}}`)
		g.wait(abi.OpSignal, "", nil)
		g.wait(abi.OpSignal, "", nil) // fired at once: the run is unwinding
		g.complete(abi.Outcome{Result: json.RawMessage(`{"stopped":true}`)})
	},
	// sleeper: waits for an hour, for a cancel, an abort or an upgrade.
	"sleeper": func(g *docGuest) {
		g.wait(abi.OpSleep, "", `{"ms":3600000}`)
		g.complete(abi.Outcome{})
	},
}

var docSteps = map[string]func(abi.StepInput) abi.Outcome{
	"plan": func(in abi.StepInput) abi.Outcome {
		if in.Attempt == 1 {
			return abi.Outcome{Error: &abi.ErrorObject{Type: "RetryableError", Message: "upstream busy", Retryable: true}}
		}
		return abi.Outcome{Result: json.RawMessage(`{"steps":["build","push","roll out"]}`)}
	},
}

// docRuns runs the doc guests on a host of its own and returns every
// event they recorded.
func docRuns(t *testing.T) []store.Event {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "doc.db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	agents := AgentFunc{List: []AgentInfo{{Name: "reviewer", Description: "Reviews plans."}},
		Fn: func(_ context.Context, turn AgentTurn) (abi.AgentResult, error) {
			return abi.AgentResult{Status: abi.AgentCompleted, Reply: "Looks good.", Data: json.RawMessage(`{"ok":true}`)}, nil
		}}
	h, err := Open(ctx, st, &Options{Engine: docEngine{}, Agents: agents, BaseURL: "http://127.0.0.1:7310", AbortGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	add := func(module, entry, output string) {
		t.Helper()
		name, _, _ := strings.Cut(module, "#")
		m := Manifest{Name: name, Entry: entry, InputSchema: json.RawMessage(`{"type":"object"}`)}
		if output != "" {
			m.OutputSchema = json.RawMessage(output)
		}
		if _, err := h.AddPlugin(ctx, []byte(module), m); err != nil {
			t.Fatalf("adding %s: %v", module, err)
		}
	}
	for _, n := range []string{"everything", "noask", "fail", "trap", "sleeper", "unwind"} {
		add(n, EntryExecute, "")
	}
	add("schema", EntryExecute, `{"type":"object","properties":{"deployed":{"type":"boolean"}}}`)
	add("serve", EntryServe, "")
	chatty := Manifest{Name: "chatty", Entry: EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`), Limits: &ManifestLimits{OutputBytes: 16}}
	if _, err := h.AddPlugin(ctx, []byte("chatty"), chatty); err != nil {
		t.Fatal(err)
	}
	call := func(tool, input string, opts *CallOptions) RunInfo {
		t.Helper()
		ri, err := h.Call(ctx, tool, json.RawMessage(input), opts)
		if err != nil {
			t.Fatalf("calling %s: %v", tool, err)
		}
		return ri
	}
	check := func(what string, ri RunInfo, err error, want store.RunStatus) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ri.Status != want {
			t.Fatalf("%s: run %s is %s (%+v), want %s", what, ri.ID, ri.Status, ri, want)
		}
	}
	later := func() time.Time { return time.Now().Add(10 * time.Minute) }
	fire := func(id string) {
		t.Helper()
		if n, err := h.FireDueOf(ctx, id, later()); err != nil || n == 0 {
			t.Fatalf("firing %s's timers: %d, %v", id, n, err)
		}
	}
	var ids []string

	ri := call("everything", `{"service":"api"}`, nil)
	ids = append(ids, ri.ID)
	check("everything, at the step's retry", ri, nil, store.StatusWaiting)
	fire(ri.ID) // the step's second attempt
	fire(ri.ID) // the sleep
	qs, err := h.Questions(ctx, true)
	if err != nil || len(qs) != 1 {
		t.Fatalf("questions: %v, %v", qs, err)
	}
	ri, err = h.AnswerAsk(ctx, qs[0].ID, Answer{OptionID: "approve"})
	check("everything, at the hook", ri, err, store.StatusWaiting)
	ri, err = h.ResumeHook(ctx, docHookToken, json.RawMessage(`{"approved":true}`))
	check("everything, at the hook again", ri, err, store.StatusWaiting)
	ri, err = h.ResumeHook(ctx, docHookToken, nil)
	check("everything, at the webhook", ri, err, store.StatusWaiting)
	var webhook string
	evs, err := h.Events(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if d, err := history.Decode(e); err == nil && e.Kind == EvHookCreated && d.Webhook != nil {
			webhook = d.Token
		}
	}
	for i, want := range []store.RunStatus{store.StatusWaiting, store.StatusCompleted} {
		if _, err := h.DeliverWebhook(ctx, webhook, abi.WebhookRequest{Method: "POST", URL: "/hook?x=1", Body: "ping",
			Headers: map[string][]string{"Content-Type": {"text/plain"}}}); err != nil {
			t.Fatal(err)
		}
		ri, err = h.Drive(ctx, ri.ID)
		check(fmt.Sprintf("everything, after webhook request %d", i), ri, err, want)
	}

	ri = call("noask", `{}`, &CallOptions{NoAsk: true})
	ids = append(ids, ri.ID)
	check("noask", ri, nil, store.StatusCompleted)
	ri = call("fail", `{}`, nil)
	ids = append(ids, ri.ID)
	check("fail", ri, nil, store.StatusFailed)
	ri = call("schema", `{}`, nil)
	ids = append(ids, ri.ID)
	check("schema", ri, nil, store.StatusFailed)
	ri = call("chatty", `{}`, nil)
	ids = append(ids, ri.ID)
	check("chatty", ri, nil, store.StatusCompleted)
	ri = call("trap", `{}`, nil)
	ids = append(ids, ri.ID)
	check("trap", ri, nil, store.StatusFailed)

	ri = call("serve", `{"release":"1.0"}`, nil)
	ids = append(ids, ri.ID)
	check("serve, at its second receive", ri, nil, store.StatusWaiting)
	if _, err := h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"release":"1.1"}`)); err != nil {
		t.Fatal(err)
	}
	ri, err = h.Drive(ctx, ri.ID)
	check("serve, at its signal", ri, err, store.StatusWaiting)
	if _, err := h.Abort(ctx, ri.ID, "task_cancel"); err != nil {
		t.Fatal(err)
	}
	docWaitEnd(t, h, ri.ID)

	ri = call("unwind", `{}`, nil)
	ids = append(ids, ri.ID)
	if _, err := h.Abort(ctx, ri.ID, "turn_cancelled"); err != nil {
		t.Fatal(err)
	}
	docWaitEnd(t, h, ri.ID)

	ri = call("sleeper", `{}`, nil)
	ids = append(ids, ri.ID)
	ri, err = h.Cancel(ctx, ri.ID, "no longer needed")
	check("sleeper, cancelled", ri, err, store.StatusCancelled)

	ri = call("sleeper", `{}`, nil)
	ids = append(ids, ri.ID)
	for _, reason := range []string{"turn_ended", ""} {
		if _, err := h.Abort(ctx, ri.ID, reason); err != nil {
			t.Fatal(err)
		}
	}
	fire(ri.ID) // the abort's grace ends: the sleep is not due yet
	ri, err = h.Run(ctx, ri.ID)
	check("sleeper, aborted", ri, err, store.StatusCancelled)

	ri = call("sleeper", `{}`, nil)
	ids = append(ids, ri.ID)
	add("sleeper#2", EntryExecute, "")
	ri, _, err = h.Upgrade(ctx, ri.ID, 2)
	check("sleeper, upgraded", ri, err, store.StatusWaiting)

	var all []store.Event
	for _, id := range ids {
		evs, err := h.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
		docExportRoundTrip(t, h, id, evs)
	}
	return all
}

// docExportRoundTrip checks what abi/HISTORY.md says of the file: what
// ExportHistory writes, ReadHistory reads back as the events the store
// holds, byte for byte, with a run record that agrees with them.
func docExportRoundTrip(t *testing.T, h *Host, id string, evs []store.Event) {
	t.Helper()
	var buf bytes.Buffer
	if err := h.ExportHistory(context.Background(), id, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("run %s: the export is not a zstd frame", id)
	}
	hist, err := ReadHistory(&buf)
	if err != nil {
		t.Fatalf("run %s: reading its export: %v", id, err)
	}
	if hist.Format != HistoryFormat || hist.Version != 1 || hist.Run.ID != id || hist.Run.LastSeq != uint64(len(evs)) || len(hist.Events) != len(evs) {
		t.Fatalf("run %s: export has format %q version %d, run %s to %d, %d events; want %d", id, hist.Format, hist.Version, hist.Run.ID, hist.Run.LastSeq, len(hist.Events), len(evs))
	}
	for i, e := range hist.Events {
		s := evs[i]
		if e.Seq != s.Seq || !e.Time.Equal(s.Time) || e.Kind != s.Kind || !bytes.Equal(e.Data, s.Data) {
			t.Fatalf("run %s: exported event %d is %d %s %s %s, the store's %d %s %s %s", id, i, e.Seq, e.Time, e.Kind, e.Data, s.Seq, s.Time, s.Kind, s.Data)
		}
	}
	if _, err := historyState(hist); err != nil {
		t.Fatalf("run %s: its export does not replay into a state: %v", id, err)
	}
}

// docWaitEnd waits for a run the host drives on its own (after an abort)
// to end.
func docWaitEnd(t *testing.T, h *Host, id string) {
	t.Helper()
	ch, stop := h.Watch(id)
	defer stop()
	for {
		ri, err := h.Run(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status.Terminal() {
			return
		}
		<-ch
	}
}
