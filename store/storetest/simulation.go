package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// Simulation applies random operations to the store and to a plain
// in-memory model of the Store contract, and compares every result and
// every error, reopening the store now and then. Set SANDFLOW_SIM_SEED to
// replay one seed. Data sizes are drawn around 1 KiB, the default
// compression threshold of both stores.
func Simulation(t *testing.T, open Opener) { SimulationAround(t, open, simThreshold) }

// SimulationAround is Simulation with data sizes drawn around size bytes,
// for a store whose compression threshold is size, so that values fall on
// both sides of it; a size below 1 draws small values only.
func SimulationAround(t *testing.T, open Opener, size int) {
	type config struct {
		seed uint64
		ops  int
	}
	configs := []config{
		{seed: 1, ops: 500},
		{seed: 2, ops: 500},
		{seed: 3, ops: 500},
		// A fresh seed each run widens coverage over time; it is logged so
		// a failure can be replayed with SANDFLOW_SIM_SEED.
		{seed: uint64(time.Now().UnixNano()), ops: 500},
	}
	if s := os.Getenv("SANDFLOW_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SANDFLOW_SIM_SEED: %v", err)
		}
		configs = []config{{seed: seed, ops: 2000}}
	}
	for _, c := range configs {
		t.Run(fmt.Sprintf("seed=%d", c.seed), func(t *testing.T) {
			t.Parallel()
			t.Logf("seed %d (replay with SANDFLOW_SIM_SEED=%d)", c.seed, c.seed)
			sim := newSim(t, open, c.seed, size)
			for i := 0; i < c.ops; i++ {
				sim.step = i
				sim.randomOp()
				sim.randomRead()
				if i%100 == 99 {
					sim.compareAll()
				}
			}
			sim.compareAll()
			if sim.stats.appendOK == 0 || sim.stats.seqConflict == 0 || sim.stats.badBatch == 0 || sim.stats.createOK == 0 || sim.stats.runExists == 0 || sim.stats.reopens == 0 {
				t.Errorf("simulation did not exercise enough paths: %+v", sim.stats)
			}
			t.Logf("stats: %+v", sim.stats)
		})
	}
}

// simThreshold is the size the simulation's data is drawn around.
const simThreshold = 1024

// ---- model ----

type timerID struct {
	nanos int64
	runID string
	id    string
}

type simRun struct {
	rec    store.Run
	events []store.Event
}

type model struct {
	runs    map[string]*simRun
	timers  map[timerID]store.Timer
	asks    map[string]store.Ask
	hooks   map[string]store.Hook
	plugins map[string][]store.Plugin
	modules map[string][]byte
}

func newModel() *model {
	return &model{
		runs:    map[string]*simRun{},
		timers:  map[timerID]store.Timer{},
		asks:    map[string]store.Ask{},
		hooks:   map[string]store.Hook{},
		plugins: map[string][]store.Plugin{},
		modules: map[string][]byte{},
	}
}

func tid(t store.Timer) timerID { return timerID{t.FireAt.UnixNano(), t.RunID, t.ID} }

func modelValidRunID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '-' || c == '_' || c == '.' || c == ':' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			return false
		}
	}
	return true
}

// storedBytes returns what a byte value looks like after the store kept
// it: copied, and nil when empty.
func storedBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// storedRun returns what a run record looks like after the store kept it:
// times in UTC, its detail as storedBytes gives it.
func storedRun(r store.Run) store.Run {
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	r.Detail = storedBytes(r.Detail)
	return r
}

func (m *model) createRun(run store.Run, b store.Batch) error {
	if !modelValidRunID(run.ID) {
		return store.ErrBadBatch
	}
	if _, ok := m.runs[run.ID]; ok {
		return store.ErrRunExists
	}
	rec := run
	if b.Run != nil {
		rec = *b.Run
	}
	return m.apply(run.ID, 0, rec, b)
}

func (m *model) appendBatch(runID string, expect uint64, b store.Batch) error {
	r, ok := m.runs[runID]
	if !ok {
		return store.ErrRunNotFound
	}
	if r.rec.LastSeq != expect {
		return store.ErrSeqConflict
	}
	rec := r.rec
	if b.Run != nil {
		rec = *b.Run
	} else if len(b.Events) > 0 {
		rec.LastSeq = b.Events[len(b.Events)-1].Seq
	}
	return m.apply(runID, expect, rec, b)
}

func (m *model) apply(runID string, last uint64, rec store.Run, b store.Batch) error {
	for i, e := range b.Events {
		if e.Seq != last+uint64(i)+1 || len(e.Kind) == 0 || len(e.Kind) > 255 {
			return store.ErrBadBatch
		}
	}
	if rec.ID != runID || rec.LastSeq != last+uint64(len(b.Events)) {
		return store.ErrBadBatch
	}
	for _, tm := range b.PutTimers {
		if tm.RunID != runID {
			return store.ErrBadBatch
		}
	}
	for _, tm := range b.DeleteTimers {
		if tm.RunID != runID {
			return store.ErrBadBatch
		}
	}
	for _, a := range b.PutAsks {
		if a.RunID != runID || a.ID == "" {
			return store.ErrBadBatch
		}
		// A question id belongs to the run that first stored it.
		if prev, ok := m.asks[a.ID]; ok && prev.RunID != runID {
			return store.ErrBadBatch
		}
	}
	r := m.runs[runID]
	if r == nil {
		r = &simRun{}
		m.runs[runID] = r
	}
	for _, e := range b.Events {
		r.events = append(r.events, store.Event{Seq: e.Seq, Time: e.Time.UTC(), Kind: e.Kind, Data: storedBytes(e.Data)})
	}
	r.rec = storedRun(rec)
	for _, tm := range b.PutTimers {
		tm.FireAt = tm.FireAt.UTC()
		m.timers[tid(tm)] = tm
	}
	for _, tm := range b.DeleteTimers {
		delete(m.timers, tid(tm))
	}
	for _, a := range b.PutAsks {
		a.CreatedAt = a.CreatedAt.UTC()
		a.Request = bytes.Clone(a.Request)
		m.asks[a.ID] = a
	}
	for _, tok := range b.ReleaseHooks {
		if h, ok := m.hooks[tok]; ok && h.RunID == runID {
			delete(m.hooks, tok)
		}
	}
	return nil
}

func (m *model) run(id string) (store.Run, error) {
	r, ok := m.runs[id]
	if !ok {
		return store.Run{}, store.ErrRunNotFound
	}
	return r.rec, nil
}

func (m *model) listRuns(f store.RunFilter) []store.Run {
	var out []store.Run
	for _, r := range m.runs {
		if (f.Status == "" || r.rec.Status == f.Status) && (f.Tool == "" || r.rec.Tool == f.Tool) {
			out = append(out, r.rec)
		}
	}
	slices.SortFunc(out, func(a, b store.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}

func (m *model) events(id string, after uint64, limit int) ([]store.Event, error) {
	r, ok := m.runs[id]
	if !ok {
		return nil, store.ErrRunNotFound
	}
	var out []store.Event
	for _, e := range r.events {
		if e.Seq > after {
			out = append(out, e)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

func (m *model) sortedTimers() []store.Timer {
	var out []store.Timer
	for _, tm := range m.timers {
		out = append(out, tm)
	}
	slices.SortFunc(out, func(a, b store.Timer) int {
		if c := a.FireAt.Compare(b.FireAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.RunID, b.RunID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

func (m *model) dueTimers(now time.Time, limit int) []store.Timer {
	var out []store.Timer
	for _, tm := range m.sortedTimers() {
		if tm.FireAt.After(now) {
			break
		}
		out = append(out, tm)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out
}

func (m *model) listAsks(openOnly bool) []store.Ask {
	var out []store.Ask
	for _, a := range m.asks {
		if !openOnly || a.Open {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b store.Ask) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

func (m *model) claimHook(token, runID string, hookID uint32) (string, error) {
	if token == "" {
		return "", store.ErrBadBatch
	}
	if h, ok := m.hooks[token]; ok && h.RunID != runID {
		return h.RunID, nil
	}
	m.hooks[token] = store.Hook{Token: token, RunID: runID, HookID: hookID}
	return "", nil
}

func (m *model) putPlugin(p store.Plugin, module []byte) (store.Plugin, error) {
	if p.Name == "" || strings.ContainsRune(p.Name, 0) || p.ModuleHash == "" {
		return store.Plugin{}, store.ErrBadBatch
	}
	p.Version = len(m.plugins[p.Name]) + 1
	p.Size = len(module)
	p.CreatedAt = p.CreatedAt.UTC()
	p.Manifest = bytes.Clone(p.Manifest)
	m.plugins[p.Name] = append(m.plugins[p.Name], p)
	if _, ok := m.modules[p.ModuleHash]; !ok {
		m.modules[p.ModuleHash] = bytes.Clone(module)
	}
	return p, nil
}

func (m *model) plugin(name string, version int) (store.Plugin, error) {
	vs := m.plugins[name]
	if version < 0 {
		return store.Plugin{}, store.ErrPluginNotFound
	}
	if version == 0 {
		if len(vs) == 0 {
			return store.Plugin{}, store.ErrPluginNotFound
		}
		return vs[len(vs)-1], nil
	}
	if version > len(vs) {
		return store.Plugin{}, store.ErrPluginNotFound
	}
	return vs[version-1], nil
}

func (m *model) listPlugins() []store.Plugin {
	var names []string
	for n := range m.plugins {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []store.Plugin
	for _, n := range names {
		out = append(out, m.plugins[n]...)
	}
	return out
}

// ---- simulation driver ----

type simStats struct {
	createOK, runExists, appendOK, seqConflict, badBatch, notFound int
	timersPut, timersDeleted, asksPut, hookClaims, hookConflicts   int
	plugins, compressedEvents, reopens, closedCalls                int
}

type sim struct {
	t     *testing.T
	seed  uint64
	step  int
	rng   *rand.Rand
	ctx   context.Context
	h     *harness
	m     *model
	base  time.Time
	thr   int
	stats simStats
	// pools
	runIDs  []string
	tools   []string
	tokens  []string
	names   []string
	modules [][]byte
	zones   []*time.Location
}

func newSim(t *testing.T, open Opener, seed uint64, threshold int) *sim {
	s := &sim{
		t:    t,
		seed: seed,
		rng:  rand.New(rand.NewPCG(seed, seed^0x5eed)),
		ctx:  context.Background(),
		h:    begin(t, open),
		m:    newModel(),
		base: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		thr:  threshold,
	}
	for i := 0; i < 24; i++ {
		s.runIDs = append(s.runIDs, fmt.Sprintf("run-%d", i))
	}
	// Ids that are prefixes of each other and use every allowed symbol.
	s.runIDs = append(s.runIDs, "a", "a.b", "a:b_c-D9", strings.Repeat("x", 128))
	s.tools = []string{"fetch", "mail", "build"}
	s.tokens = []string{"tok-a", "tok-b", "tok-c", "tok-d", "tok-e", "tok-f"}
	s.names = []string{"alpha", "beta", "beta-2", "gamma"}
	big := bytes.Repeat([]byte("\x00asm module section "), 300) // compressible, ~6 KB
	noise := make([]byte, 2048)
	for i := range noise {
		noise[i] = byte(s.rng.Uint32())
	}
	s.modules = [][]byte{[]byte("\x00asm\x01\x00\x00\x00"), big, noise, {}}
	s.zones = []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -8*3600)}
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.step, fmt.Sprintf(format, args...))
}

func (s *sim) checkErr(op string, got, want error) {
	s.t.Helper()
	if want == nil {
		if got != nil {
			s.fatalf("%s: store returned %v, model accepted it", op, got)
		}
		return
	}
	if !errors.Is(got, want) {
		s.fatalf("%s: store returned error %v, model expected %v", op, got, want)
	}
	switch want {
	case store.ErrSeqConflict:
		s.stats.seqConflict++
	case store.ErrBadBatch:
		s.stats.badBatch++
	case store.ErrRunExists:
		s.stats.runExists++
	case store.ErrRunNotFound:
		s.stats.notFound++
	}
}

func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

func pick[T any](s *sim, xs []T) T { return xs[s.rng.IntN(len(xs))] }

// randTime returns a UTC time near base with nanosecond precision.
func (s *sim) randTime() time.Time {
	return s.base.Add(time.Duration(s.rng.Int64N(int64(72 * time.Hour))))
}

// coarseTime returns one of few instants, so that sorting ties happen.
func (s *sim) coarseTime() time.Time {
	return s.base.Add(time.Duration(s.rng.IntN(6)) * time.Minute)
}

func (s *sim) randData() []byte {
	switch s.rng.IntN(6) {
	case 0:
		return nil
	case 1:
		return []byte(fmt.Sprintf(`{"n":%d}`, s.rng.IntN(1000)))
	case 2, 3: // compressible, around the threshold
		n := s.rng.IntN(2*s.thr + 200)
		return []byte(`{"blob":"` + strings.Repeat("ab", n/2) + `"}`)
	case 4: // incompressible: exercises the stored-raw fallback
		b := make([]byte, s.rng.IntN(3*min(s.thr, 1500)+10))
		for i := range b {
			b[i] = byte(s.rng.Uint32())
		}
		return b
	default: // large
		return bytes.Repeat([]byte(`{"k":"v","list":[1,2,3]},`), 100+s.rng.IntN(200))
	}
}

func (s *sim) randJSON() []byte {
	return []byte(fmt.Sprintf(`{"q":"question %d","n":[%d,%d]}`, s.rng.IntN(100), s.rng.IntN(10), s.rng.IntN(10)))
}

func (s *sim) randKind() string {
	return pick(s, []string{"started", "step", "log", "k", strings.Repeat("K", 255)})
}

func (s *sim) events(from uint64, n int) []store.Event {
	var out []store.Event
	for i := 0; i < n; i++ {
		d := s.randData()
		if len(d) >= s.thr && s.thr > 0 {
			s.stats.compressedEvents++
		}
		out = append(out, store.Event{
			Seq:  from + uint64(i),
			Time: s.randTime().In(pick(s, s.zones)),
			Kind: s.randKind(),
			Data: d,
		})
	}
	return out
}

func (s *sim) existingRunIDs() []string {
	var ids []string
	for id := range s.m.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// someRunID returns an existing run id most of the time.
func (s *sim) someRunID() string {
	ids := s.existingRunIDs()
	if len(ids) == 0 || s.chance(0.1) {
		return pick(s, s.runIDs)
	}
	return pick(s, ids)
}

func (s *sim) randRecord(id string, lastSeq uint64, created time.Time) *store.Run {
	r := &store.Run{
		ID:         id,
		Tool:       pick(s, s.tools),
		Plugin:     pick(s, s.names),
		Version:    s.rng.IntN(4),
		ModuleHash: fmt.Sprintf("h%d", s.rng.IntN(4)),
		Status:     pick(s, []store.RunStatus{store.StatusRunning, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCancelled}),
		CreatedAt:  created,
		UpdatedAt:  s.randTime(),
		LastSeq:    lastSeq,
	}
	if s.chance(0.5) {
		r.Detail = s.randJSON()
	}
	return r
}

// indexChanges adds random timer, question and hook changes for run id to b.
func (s *sim) indexChanges(id string, b *store.Batch) {
	for n := s.rng.IntN(3); n > 0; n-- {
		b.PutTimers = append(b.PutTimers, store.Timer{
			RunID:    id,
			ID:       fmt.Sprintf("t%d", s.rng.IntN(5)),
			FireAt:   s.randTime(),
			Kind:     pick(s, []string{"sleep", "deadline"}),
			Position: s.rng.Uint32N(50),
		})
	}
	if s.chance(0.5) {
		var mine []store.Timer
		for _, tm := range s.m.sortedTimers() {
			if tm.RunID == id {
				mine = append(mine, tm)
			}
		}
		for n := s.rng.IntN(3); n > 0 && len(mine) > 0; n-- {
			b.DeleteTimers = append(b.DeleteTimers, pick(s, mine))
		}
		if s.chance(0.2) { // deleting a timer that is not there is a no-op
			b.DeleteTimers = append(b.DeleteTimers, store.Timer{RunID: id, ID: "none", FireAt: s.randTime()})
		}
	}
	if s.chance(0.3) {
		askID := fmt.Sprintf("%s/ask-%d", id, s.rng.IntN(3))
		if s.chance(0.1) {
			askID = fmt.Sprintf("shared-ask-%d", s.rng.IntN(2)) // taken over from another run
		}
		b.PutAsks = append(b.PutAsks, store.Ask{
			ID:        askID,
			RunID:     id,
			Tool:      pick(s, s.tools),
			Position:  s.rng.Uint32N(10),
			Open:      s.chance(0.6),
			Request:   s.randJSON(),
			CreatedAt: s.coarseTime(),
		})
	}
	if s.chance(0.3) {
		b.ReleaseHooks = append(b.ReleaseHooks, pick(s, s.tokens))
	}
	s.stats.timersPut += len(b.PutTimers)
	s.stats.timersDeleted += len(b.DeleteTimers)
	s.stats.asksPut += len(b.PutAsks)
}

// spoil breaks a valid batch in one of several ways; all of them must be
// refused with store.ErrBadBatch and change nothing.
func (s *sim) spoil(id string, last uint64, b *store.Batch) {
	switch s.rng.IntN(8) {
	case 0: // numbering starts one too far
		b.Events = s.events(last+2, 1+s.rng.IntN(2))
	case 1: // gap
		b.Events = s.events(last+1, 3)
		b.Events[2].Seq++
	case 2: // repeated seq
		b.Events = s.events(last+1, 2)
		b.Events[1].Seq = b.Events[0].Seq
	case 3:
		b.Events = s.events(last+1, 1)
		b.Events[0].Kind = pick(s, []string{"", strings.Repeat("k", 256)})
	case 4: // record does not match the log
		b.Events = s.events(last+1, 1)
		b.Run = s.randRecord(id, last+uint64(len(b.Events))+1, s.coarseTime())
	case 5:
		b.Run = s.randRecord(id+"x", last+uint64(len(b.Events)), s.coarseTime())
	case 6:
		b.PutTimers = append(b.PutTimers, store.Timer{RunID: "someone-else", ID: "t", FireAt: s.randTime()})
	case 7:
		b.PutAsks = append(b.PutAsks, store.Ask{ID: pick(s, []string{"", "x"}), RunID: pick(s, []string{id, "someone-else"}), Request: s.randJSON()})
		if b.PutAsks[len(b.PutAsks)-1].ID == "x" && b.PutAsks[len(b.PutAsks)-1].RunID == id {
			b.PutAsks[len(b.PutAsks)-1].ID = ""
		}
	}
}

func (s *sim) randomOp() {
	switch r := s.rng.IntN(100); {
	case r < 15:
		s.opCreate()
	case r < 60:
		s.opAppend()
	case r < 72:
		s.opClaim()
	case r < 80:
		s.opPutPlugin()
	case r < 82:
		s.opReopen()
	default:
		// reads only this step
	}
}

func (s *sim) opCreate() {
	var id string
	switch x := s.rng.IntN(10); {
	case x < 7:
		id = pick(s, s.runIDs) // may be taken already
	case x < 8:
		ids := s.existingRunIDs()
		if len(ids) == 0 {
			return
		}
		id = pick(s, ids) // surely taken
	default:
		id = pick(s, []string{"", "has space", "slash/y", "nul\x00id", "naïve", strings.Repeat("y", 129)})
	}
	created := s.coarseTime()
	n := s.rng.IntN(4)
	b := store.Batch{Events: s.events(1, n)}
	run := *s.randRecord(id, uint64(n), created)
	switch x := s.rng.IntN(10); {
	case x < 3:
		b.Run = s.randRecord(id, uint64(n), created) // explicit record
	case x < 4:
		run.LastSeq = uint64(n + 1) // record does not match the log
	}
	if s.chance(0.8) {
		s.indexChanges(id, &b)
	} else if s.chance(0.5) {
		s.spoil(id, 0, &b)
	}
	want := s.m.createRun(run, b)
	got := s.h.S.CreateRun(s.ctx, run, b)
	s.checkErr(fmt.Sprintf("CreateRun(%q, %d events)", id, len(b.Events)), got, want)
	if want == nil {
		s.stats.createOK++
	}
	s.compareRun(id)
}

func (s *sim) opAppend() {
	id := s.someRunID()
	var last uint64
	if r, ok := s.m.runs[id]; ok {
		last = r.rec.LastSeq
	}
	expect := last
	wrong := s.chance(0.15)
	if wrong {
		switch {
		case last > 0 && s.chance(0.5):
			expect = last - 1 - uint64(s.rng.IntN(int(min(last, 3))))
		default:
			expect = last + 1 + uint64(s.rng.IntN(2))
		}
	}
	// The batch is built as the caller would: from what it believes.
	n := s.rng.IntN(4)
	b := store.Batch{Events: s.events(expect+1, n)}
	if s.chance(0.5) {
		created := time.Time{}
		if r, ok := s.m.runs[id]; ok {
			created = r.rec.CreatedAt
		}
		b.Run = s.randRecord(id, expect+uint64(n), created)
	}
	if s.chance(0.85) {
		s.indexChanges(id, &b)
	} else {
		s.spoil(id, expect, &b)
	}
	want := s.m.appendBatch(id, expect, b)
	got := s.h.S.Append(s.ctx, id, expect, b)
	s.checkErr(fmt.Sprintf("Append(%q, expect %d, %d events) at %d", id, expect, len(b.Events), last), got, want)
	if want == nil {
		s.stats.appendOK++
	}
	s.compareRun(id)
	s.compareEvents(id, last-min(last, 2), 0)
}

func (s *sim) opClaim() {
	token := pick(s, s.tokens)
	if s.chance(0.03) {
		token = ""
	}
	runID := s.someRunID()
	hookID := s.rng.Uint32N(100)
	wantHolder, wantErr := s.m.claimHook(token, runID, hookID)
	gotHolder, gotErr := s.h.S.ClaimHook(s.ctx, token, runID, hookID)
	op := fmt.Sprintf("ClaimHook(%q, %q, %d)", token, runID, hookID)
	s.checkErr(op, gotErr, wantErr)
	if gotHolder != wantHolder {
		s.fatalf("%s: holder %q, want %q", op, gotHolder, wantHolder)
	}
	s.stats.hookClaims++
	if wantHolder != "" {
		s.stats.hookConflicts++
	}
	s.compareHook(token)
}

func (s *sim) opPutPlugin() {
	name := pick(s, s.names)
	if s.chance(0.03) {
		name = pick(s, []string{"", "nul\x00name"})
	}
	module := pick(s, s.modules)
	sum := sha256.Sum256(module)
	hash := hex.EncodeToString(sum[:])
	switch x := s.rng.IntN(20); {
	case x == 0:
		hash = ""
	case x == 1:
		// A hash that is already stored, with other bytes: the first bytes
		// stay ("once per hash"). With no hash stored yet the bytes picked
		// stay: other bytes under their hash would be a module whose bytes
		// do not hash to its name, which Verify reports as damage.
		if hashes := s.moduleHashes(); len(hashes) > 0 {
			hash = pick(s, hashes)
			module = []byte("different bytes")
		}
	}
	p := store.Plugin{Name: name, ModuleHash: hash, Manifest: s.randJSON(), CreatedAt: s.randTime(), Version: 99, Size: -1}
	want, wantErr := s.m.putPlugin(p, module)
	got, gotErr := s.h.S.PutPlugin(s.ctx, p, module)
	op := fmt.Sprintf("PutPlugin(%q, %d bytes)", name, len(module))
	s.checkErr(op, gotErr, wantErr)
	if wantErr == nil {
		s.stats.plugins++
		if d := diffPlugin(got, want); d != "" {
			s.fatalf("%s returned %s", op, d)
		}
		s.comparePlugin(name, 0)
		s.compareModule(hash)
	}
}

func (s *sim) opReopen() {
	s.stats.reopens++
	if err := s.h.S.Close(); err != nil {
		s.fatalf("Close: %v", err)
	}
	if s.chance(0.5) {
		// Calls on a closed store fail with store.ErrClosed and change nothing.
		s.stats.closedCalls++
		id := s.someRunID()
		var err error
		switch s.rng.IntN(5) {
		case 0:
			err = s.h.S.Append(s.ctx, id, 0, store.Batch{})
		case 1:
			_, err = s.h.S.Run(s.ctx, id)
		case 2:
			_, err = s.h.S.Events(s.ctx, id, 0, 0)
		case 3:
			_, err = s.h.S.ClaimHook(s.ctx, "tok-a", id, 1)
		case 4:
			_, _, err = s.h.S.NextTimer(s.ctx)
		}
		s.checkErr("call after Close", err, store.ErrClosed)
	}
	s.h.reopen()
	s.compareAll()
}

func (s *sim) randomRead() {
	switch s.rng.IntN(11) {
	case 0:
		s.compareRun(s.someRunID())
	case 1:
		f := store.RunFilter{Limit: s.rng.IntN(6) - 1}
		if s.chance(0.5) {
			f.Status = pick(s, []store.RunStatus{store.StatusRunning, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCancelled, "nonsense"})
		}
		if s.chance(0.5) {
			f.Tool = pick(s, append(s.tools, "nonsense"))
		}
		s.compareRuns(f)
	case 2:
		id := s.someRunID()
		var last uint64
		if r, ok := s.m.runs[id]; ok {
			last = r.rec.LastSeq
		}
		s.compareEvents(id, uint64(s.rng.IntN(int(last)+3)), s.rng.IntN(6)-1)
	case 3:
		now := s.randTime()
		switch all := s.m.sortedTimers(); {
		case s.chance(0.1):
			now = s.base.Add(-time.Hour)
		case len(all) > 0 && s.chance(0.4):
			// Exactly at a timer's instant, or a nanosecond before it.
			now = pick(s, all).FireAt.Add(-time.Duration(s.rng.IntN(2)))
		}
		s.compareDue(now, s.rng.IntN(5)-1)
	case 4:
		s.compareNextTimer()
	case 5:
		ids := []string{"nope", "shared-ask-0"}
		for id := range s.m.asks {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		s.compareAsk(pick(s, ids))
	case 6:
		s.compareAsks(s.chance(0.5))
	case 7:
		s.compareHook(pick(s, append(s.tokens, "unknown")))
	case 8:
		s.comparePlugin(pick(s, append(s.names, "unknown")), s.rng.IntN(6)-1)
	case 9:
		s.comparePlugins()
	case 10:
		s.compareModule(pick(s, append(s.moduleHashes(), "deadbeef")))
	}
}

func (s *sim) moduleHashes() []string {
	var hashes []string
	for h := range s.m.modules {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	return hashes
}

// ---- comparisons ----

func (s *sim) compareRun(id string) {
	s.t.Helper()
	want, wantErr := s.m.run(id)
	got, gotErr := s.h.S.Run(s.ctx, id)
	s.checkErr(fmt.Sprintf("store.Run(%q)", id), gotErr, wantErr)
	if d := diffRun(got, want); wantErr == nil && d != "" {
		s.fatalf("store.Run(%q): %s", id, d)
	}
}

func (s *sim) compareRuns(f store.RunFilter) {
	s.t.Helper()
	got, err := s.h.S.Runs(s.ctx, f)
	s.checkErr(fmt.Sprintf("Runs(%+v)", f), err, nil)
	if d := diffList(got, s.m.listRuns(f), diffRun); d != "" {
		s.fatalf("Runs(%+v): %s", f, d)
	}
}

func (s *sim) compareEvents(id string, after uint64, limit int) {
	s.t.Helper()
	want, wantErr := s.m.events(id, after, limit)
	got, gotErr := s.h.S.Events(s.ctx, id, after, limit)
	op := fmt.Sprintf("Events(%q, after %d, limit %d)", id, after, limit)
	s.checkErr(op, gotErr, wantErr)
	if d := diffList(got, want, diffEvent); d != "" {
		s.fatalf("%s: %s", op, d)
	}
}

func (s *sim) compareDue(now time.Time, limit int) {
	s.t.Helper()
	got, err := s.h.S.DueTimers(s.ctx, now, limit)
	op := fmt.Sprintf("DueTimers(%s, %d)", now.Format(time.RFC3339Nano), limit)
	s.checkErr(op, err, nil)
	if d := diffList(got, s.m.dueTimers(now, limit), diffTimer); d != "" {
		s.fatalf("%s: %s", op, d)
	}
}

func (s *sim) compareNextTimer() {
	s.t.Helper()
	got, ok, err := s.h.S.NextTimer(s.ctx)
	s.checkErr("NextTimer", err, nil)
	all := s.m.sortedTimers()
	if ok != (len(all) > 0) {
		s.fatalf("NextTimer: ok=%v with %d timers in the model", ok, len(all))
	}
	if ok {
		if d := diffTimer(got, all[0]); d != "" {
			s.fatalf("NextTimer: %s", d)
		}
	}
}

func (s *sim) compareAsk(id string) {
	s.t.Helper()
	want, ok := s.m.asks[id]
	var wantErr error
	if !ok {
		wantErr = store.ErrAskNotFound
	}
	got, err := s.h.S.Ask(s.ctx, id)
	s.checkErr(fmt.Sprintf("store.Ask(%q)", id), err, wantErr)
	if d := diffAsk(got, want); ok && d != "" {
		s.fatalf("store.Ask(%q): %s", id, d)
	}
}

func (s *sim) compareAsks(openOnly bool) {
	s.t.Helper()
	got, err := s.h.S.Asks(s.ctx, openOnly)
	s.checkErr("Asks", err, nil)
	if d := diffList(got, s.m.listAsks(openOnly), diffAsk); d != "" {
		s.fatalf("Asks(openOnly=%v): %s", openOnly, d)
	}
}

func (s *sim) compareHook(token string) {
	s.t.Helper()
	want, ok := s.m.hooks[token]
	var wantErr error
	if !ok {
		wantErr = store.ErrHookNotFound
	}
	got, err := s.h.S.Hook(s.ctx, token)
	s.checkErr(fmt.Sprintf("store.Hook(%q)", token), err, wantErr)
	if d := diffHook(got, want); ok && d != "" {
		s.fatalf("store.Hook(%q): %s", token, d)
	}
}

func (s *sim) comparePlugin(name string, version int) {
	s.t.Helper()
	want, wantErr := s.m.plugin(name, version)
	got, gotErr := s.h.S.Plugin(s.ctx, name, version)
	op := fmt.Sprintf("store.Plugin(%q, %d)", name, version)
	s.checkErr(op, gotErr, wantErr)
	if d := diffPlugin(got, want); wantErr == nil && d != "" {
		s.fatalf("%s: %s", op, d)
	}
}

func (s *sim) comparePlugins() {
	s.t.Helper()
	got, err := s.h.S.Plugins(s.ctx)
	s.checkErr("Plugins", err, nil)
	if d := diffList(got, s.m.listPlugins(), diffPlugin); d != "" {
		s.fatalf("Plugins: %s", d)
	}
}

func (s *sim) compareModule(hash string) {
	s.t.Helper()
	want, ok := s.m.modules[hash]
	var wantErr error
	if !ok {
		wantErr = store.ErrModuleNotFound
	}
	got, err := s.h.S.Module(s.ctx, hash)
	s.checkErr(fmt.Sprintf("Module(%q)", hash), err, wantErr)
	if ok && !bytes.Equal(got, want) {
		s.fatalf("Module(%q): got %d bytes, want %d", hash, len(got), len(want))
	}
}

// compareAll compares the whole visible state.
func (s *sim) compareAll() {
	s.t.Helper()
	s.compareRuns(store.RunFilter{})
	for _, id := range s.existingRunIDs() {
		s.compareRun(id)
		s.compareEvents(id, 0, 0)
	}
	s.compareRun("never-created")
	s.compareDue(s.base.Add(1000*time.Hour), 0)
	s.compareNextTimer()
	s.compareAsks(false)
	s.compareAsks(true)
	for _, tok := range s.tokens {
		s.compareHook(tok)
	}
	s.comparePlugins()
	for _, n := range s.names {
		s.comparePlugin(n, 0)
	}
	for h := range s.m.modules {
		s.compareModule(h)
	}
}
