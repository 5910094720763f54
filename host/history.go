package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/internal/state"
	"io"
	"reflect"
	"slices"
	"sync"

	"github.com/sandflow/sandflow/host/history"

	"github.com/klauspost/compress/zstd"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
)

// ExportHistory writes a run's history to w, zstd-compressed.
func (h *Host) ExportHistory(ctx context.Context, runID string, w io.Writer) error {
	rec, err := h.store.Run(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrRunNotFound) {
			return fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		return err
	}
	evs, err := h.store.Events(ctx, runID, 0, 0)
	if err != nil {
		return err
	}
	// The run may have moved on between the two reads: keep the events the
	// record describes.
	if uint64(len(evs)) > rec.LastSeq {
		evs = evs[:rec.LastSeq]
	}
	hist := History{Format: HistoryFormat, Version: 1, Run: rec, Events: make([]HistoryEvent, len(evs))}
	for i, e := range evs {
		hist.Events[i] = HistoryEvent{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Data: e.Data}
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(zw)
	enc.SetIndent("", " ")
	if err := enc.Encode(hist); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

// state rebuilds the run's state from the history, checking its events and
// that the run record agrees with them.
func historyState(hist *History) (*state.Run, error) {
	rs := state.New(hist.Run)
	rs.Reserve(len(hist.Events), func(i int) string { return hist.Events[i].Kind })
	for i := range hist.Events {
		he := &hist.Events[i]
		if err := rs.Apply(store.Event{Seq: he.Seq, Time: he.Time, Kind: he.Kind, Data: he.Data}); err != nil {
			return nil, err
		}
	}
	plugin, version, hash := "", rs.PinVersion, rs.PinHash
	if rs.Created != nil {
		plugin = rs.Created.Plugin
	}
	r := hist.Run
	switch {
	case r.LastSeq != rs.LastSeq:
		return nil, fmt.Errorf("%w: the run record ends at event %d, the events at %d", ErrBadHistory, r.LastSeq, rs.LastSeq)
	case r.Plugin != plugin || r.Version != version || r.ModuleHash != hash:
		return nil, fmt.Errorf("%w: the run record names %s version %d (module %s), its events %s version %d (module %s)",
			ErrBadHistory, r.Plugin, r.Version, history.ShortHash(r.ModuleHash), plugin, version, history.ShortHash(hash))
	}
	return rs, nil
}

// ReplayReport says how a replay check went.
type ReplayReport struct {
	RunID string `json:"runId"`
	// Module is the hash of the module the history was replayed against.
	Module string `json:"module"`
	// Ops is how many recorded ops the guest asked for again: on a
	// divergence, those before it.
	Ops int `json:"ops"`
	// RecordedOps is how many the history has.
	RecordedOps int `json:"recordedOps"`
	// ActivationsReached is how many of the recorded activations the guest
	// got into (the one it diverged in counts); Activations is how many
	// the history has.
	ActivationsReached int `json:"activationsReached"`
	Activations        int `json:"activations"`
	// End is how the guest stopped: "completed", "suspended", or "beyond"
	// (it went past the history, with Next its next op); "" when it
	// diverged.
	End  string `json:"end"`
	Next string `json:"next,omitempty"`
	// Outcome compares, when End is "completed", the result or error the
	// guest completed with against the run's recorded end: "same", or
	// "differs" with OutcomeDetail saying how; "unchecked" when the guest
	// sent its complete op with the if-recorded flag, so without them.
	// The ops matching is what makes a replay consistent; a different
	// result is reported here, and is an error only through Strict.
	Outcome       string `json:"outcome,omitempty"`
	OutcomeDetail string `json:"outcomeDetail,omitempty"`
}

// Strict returns a *ResultDiffersError when the report's Outcome is
// "differs", and nil otherwise: for a check that must fail on a changed
// result as it does on changed ops.
func (r *ReplayReport) Strict() error {
	if r == nil || r.Outcome != OutcomeDiffers {
		return nil
	}
	return &ResultDiffersError{RunID: r.RunID, Detail: r.OutcomeDetail}
}

// Values of ReplayReport.Outcome.
const (
	OutcomeSame      = "same"
	OutcomeDiffers   = "differs"
	OutcomeUnchecked = "unchecked"
)

// compareEnd compares the complete op a checked guest replayed (its
// payload, or probed when it sent the op without one) with the run's
// recorded end.
func compareEnd(rs *state.Run, payload []byte, probed bool) (outcome, detail string) {
	if probed {
		return OutcomeUnchecked, ""
	}
	var out abi.Outcome
	if m := history.DecodeOutcome(payload, &out); m != "" {
		// The live op would have been refused, and the history records
		// an end: the guest cannot have ended this way.
		return OutcomeDiffers, "the guest's complete payload is malformed: " + m
	}
	var wantRes json.RawMessage
	var wantErr *abi.ErrorObject
	gotRes := state.NullIfEmpty(out.Result)
	switch rs.Status {
	case store.StatusCompleted:
		wantRes = rs.Result
		if out.Error == nil && string(gotRes) == "null" && rs.LastProgress != nil {
			gotRes = rs.LastProgress // as the live op makes it
		}
	case store.StatusFailed:
		wantErr = rs.Failure
		if wantErr.Type == abi.ErrTypeOutputSchema && rs.EndResult != nil {
			// The body completed; the host failed the run for its result.
			wantRes, wantErr = rs.EndResult, nil
			if out.Error == nil && string(gotRes) == "null" && rs.LastProgress != nil {
				gotRes = rs.LastProgress
			}
		}
	case store.StatusCancelled:
		wantRes, wantErr = state.NullIfEmpty(rs.EndResult), rs.Failure
	default:
		return OutcomeDiffers, fmt.Sprintf("the guest completed where the history's run is %s", rs.Status)
	}
	switch {
	case wantErr == nil && out.Error != nil:
		return OutcomeDiffers, fmt.Sprintf("the history has result %s, the guest failed with %s", clipJSON(wantRes), clipJSON(mustJSON(out.Error)))
	case wantErr != nil && out.Error == nil:
		return OutcomeDiffers, fmt.Sprintf("the history has error %s, the guest completed with %s", clipJSON(mustJSON(wantErr)), clipJSON(gotRes))
	case wantErr != nil && !sameJSON(mustJSON(wantErr), mustJSON(state.ErrOrUnknown(out.Error))):
		return OutcomeDiffers, fmt.Sprintf("the history has error %s, the guest's is %s", clipJSON(mustJSON(wantErr)), clipJSON(mustJSON(state.ErrOrUnknown(out.Error))))
	case wantRes != nil && !sameJSON(wantRes, gotRes):
		return OutcomeDiffers, fmt.Sprintf("the history has result %s, the guest's is %s", clipJSON(wantRes), clipJSON(gotRes))
	}
	return OutcomeSame, ""
}

// sameJSON reports whether two JSON texts are the same value: object keys
// in any order, numbers compared as written.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if decodeNumbers(a, &va) != nil || decodeNumbers(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func decodeNumbers(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// clipJSON shortens a JSON text for a message.
func clipJSON(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// CheckReplay replays a history against a module without recording
// anything, and reports whether the module asks for what the history
// recorded. wasm nil means the module the history's run is pinned to,
// which must be registered on this host. A divergence is returned as a
// *NonDeterminismError along with the report so far.
func (h *Host) CheckReplay(ctx context.Context, hist *History, wasm []byte) (*ReplayReport, error) {
	rs, err := historyState(hist)
	if err != nil {
		return nil, err
	}
	var lp *loadedPlugin
	if wasm == nil {
		lp, err = h.plugin(ctx, hist.Run.Plugin, hist.Run.Version)
		if err == nil && lp.p.ModuleHash != hist.Run.ModuleHash {
			err = fmt.Errorf("%w: %s version %d here is module %s, the history's run used %s; give the module to check against",
				ErrUnknownTool, hist.Run.Plugin, hist.Run.Version, history.ShortHash(lp.p.ModuleHash), history.ShortHash(hist.Run.ModuleHash))
		}
		if err != nil {
			return nil, err
		}
	} else {
		lp, _, err = h.adHocPlugin(ctx, h.engine, wasm, hist.Run.Plugin)
		if err != nil {
			return nil, err
		}
	}
	return h.checkReplay(ctx, rs, lp)
}

// CheckReplayOn is CheckReplay against a module for the named engine (one
// of Options.Engines, or wazero or wasmtime; "" for the host's own): a
// JavaScript tool's script, say, against the history of a WebAssembly
// guest's run.
func (h *Host) CheckReplayOn(ctx context.Context, hist *History, module []byte, engine string) (*ReplayReport, error) {
	rs, err := historyState(hist)
	if err != nil {
		return nil, err
	}
	eng, err := h.checkEngine(ctx, engine)
	if err != nil {
		return nil, err
	}
	lp, _, err := h.adHocPlugin(ctx, eng, module, hist.Run.Plugin)
	if err != nil {
		return nil, err
	}
	return h.checkReplay(ctx, rs, lp)
}

// checkEngine is the engine a replay check names: "" for the host's own.
func (h *Host) checkEngine(ctx context.Context, engine string) (Engine, error) {
	if engine == "" {
		return h.engine, nil
	}
	eng, err := h.engineFor(ctx, engine)
	if err != nil {
		return nil, fmt.Errorf("engine %s is not available on this host: %w", engine, err)
	}
	return eng, nil
}

// ReplayChecker checks histories against one module, found or compiled
// once: a gate that checks a new build against many recorded runs, or a
// benchmark, pays for identifying the module (comparing its bytes with a
// kept copy, or hashing and compiling them) once instead of at every
// check. It shares the host's copy of the module. Safe for concurrent use.
type ReplayChecker struct {
	h      *Host
	eng    Engine
	mu     sync.Mutex
	module []byte // the host's copy, which no one writes
	lp     *loadedPlugin
}

// NewReplayChecker makes a checker of histories against module on the
// named engine ("" for the host's default): CheckReplayOn for many
// histories. The module is compiled now, so one the engine refuses is
// reported here; the caller's bytes are not kept.
func (h *Host) NewReplayChecker(ctx context.Context, module []byte, engine string) (*ReplayChecker, error) {
	eng, err := h.checkEngine(ctx, engine)
	if err != nil {
		return nil, err
	}
	c := &ReplayChecker{h: h, eng: eng, module: module}
	if _, err := c.plugin(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Check replays hist against the checker's module, as CheckReplayOn does.
func (c *ReplayChecker) Check(ctx context.Context, hist *History) (*ReplayReport, error) {
	rs, err := historyState(hist)
	if err != nil {
		return nil, err
	}
	lp, err := c.plugin(ctx)
	if err != nil {
		return nil, err
	}
	return c.h.checkReplay(ctx, rs, lp)
}

// plugin returns the checker's loaded module. The host keeps a few modules
// checked ad hoc, with their pools of instances; one it has let go of is
// found, or compiled, again. The module is loaded under no plugin name: a
// check runs no step, the only place a plugin's name shows.
func (c *ReplayChecker) plugin(ctx context.Context) (*loadedPlugin, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lp != nil && !c.lp.isClosed() {
		return c.lp, nil
	}
	lp, kept, err := c.h.adHocPlugin(ctx, c.eng, c.module, "")
	if err != nil {
		return nil, err
	}
	c.lp, c.module = lp, kept
	return lp, nil
}

// adHocPlugin compiles a module for a replay check without registering it.
// The last few such modules are kept, with a copy of their bytes and their
// pools of pre-initialised instances, and found again by comparing the
// bytes: checking the same module again neither hashes it with SHA-256 nor
// makes its instances afresh. It returns the host's copy of the module,
// which no one writes.
func (h *Host) adHocPlugin(ctx context.Context, eng Engine, wasm []byte, name string) (*loadedPlugin, []byte, error) {
	key := adHocKey{engine: eng.Name(), name: name}
	h.mu.Lock()
	kept := slices.Clone(h.adHoc)
	h.mu.Unlock()
	for _, e := range kept {
		// The module is compared with the kept copy, not hashed, and
		// outside the host's lock: a compare runs at memory speed and stops
		// at the first difference, where hashing a Go guest's 3.5 MB was a
		// third of a 1,000-step check.
		if e.key != key || !bytes.Equal(e.module, wasm) {
			continue
		}
		h.mu.Lock()
		for i, c := range h.adHoc {
			if c.lp == e.lp {
				h.adHoc = append(append(h.adHoc[:i:i], h.adHoc[i+1:]...), c) // most recent last
				break
			}
		}
		h.mu.Unlock()
		return e.lp, e.module, nil
	}
	if _, isSource := eng.(SourceEngine); !isSource {
		if err := plugins.CheckModuleLimits(wasm, h.limits); err != nil {
			return nil, nil, err
		}
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	cm, err := h.compile(ctx, eng, hash, wasm)
	if err != nil {
		return nil, nil, err
	}
	lp := &loadedPlugin{p: store.Plugin{Name: name, ModuleHash: hash}, limits: h.limits, cm: cm, caps: map[string]bool{}}
	module := bytes.Clone(wasm)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return lp, module, nil
	}
	h.adHoc = append(h.adHoc, adHocEntry{key: key, module: module, lp: lp})
	var old *loadedPlugin
	if len(h.adHoc) > maxAdHoc {
		old = h.adHoc[0].lp
		h.adHoc = h.adHoc[1:]
	}
	h.mu.Unlock()
	if old != nil {
		old.closeFresh(ctx)
	}
	return lp, module, nil
}

// maxAdHoc is how many modules checked ad hoc a host keeps.
const maxAdHoc = 4

type adHocKey struct{ engine, name string }

type adHocEntry struct {
	key    adHocKey
	module []byte // a copy of the module checked
	lp     *loadedPlugin
}

func (h *Host) checkReplay(ctx context.Context, rs *state.Run, lp *loadedPlugin) (*ReplayReport, error) {
	rep := &ReplayReport{RunID: rs.ID, Module: lp.p.ModuleHash, RecordedOps: len(rs.Ops), Activations: rs.Acts()}
	if rs.Acts() == 0 {
		rep.End = "suspended"
		return rep, nil
	}
	if rs.Created != nil && rs.Created.SharedInit {
		defer h.refill(lp) // it may have taken a pooled instance
	}
	w, err := h.newWorkflowInstance(ctx, rs, lp, true)
	if err != nil {
		return rep, err
	}
	defer h.recycle(ctx, w, nil) // reset for the next check, unless the check stopped it
	w.begin(nil)
	res, err := w.inst.Call(ctx, abi.RunExport)
	rep.Ops, rep.ActivationsReached = int(w.cursor), min(w.act+1, rep.Activations)
	var fe *frontierError
	switch {
	case errors.As(err, &fe):
		rep.End, rep.Next = "beyond", fe.next.String()
		return rep, nil
	case errors.Is(err, errBlockSuspend):
		rep.End = "suspended"
		return rep, nil
	case err != nil:
		return rep, err
	case res == abi.RunSuspended && w.suspended:
		rep.End = "suspended"
	case res == abi.RunDone && w.completed:
		rep.End = "completed"
		rep.Outcome, rep.OutcomeDetail = compareEnd(rs, w.ended, w.endProbed)
	default:
		return rep, &GuestError{Message: fmt.Sprintf("ABI violation: %s returned %d", abi.RunExport, res)}
	}
	return rep, nil
}

// Upgrade moves a run to another version of its plugin, after checking
// that the new version replays the run's history. If it does not, the
// *NonDeterminismError is returned and nothing changes; the run goes on on
// its old version. On success the switch is recorded in the log and the
// run continues on the new version.
func (h *Host) Upgrade(ctx context.Context, runID string, version int) (RunInfo, *ReplayReport, error) {
	var rep *ReplayReport
	info, err := h.withRun(ctx, runID, func(rh *runHandle) error {
		rs := rh.rs
		if rs.Status.Terminal() {
			return fmt.Errorf("%w: run %s is %s", ErrRunEnded, runID, rs.Status)
		}
		lp, err := h.pluginToStart(ctx, rs.Rec.Plugin, version)
		if err != nil {
			return err
		}
		if rep, err = h.checkReplay(ctx, rs, lp); err != nil {
			return err
		}
		from, fromHash := rs.Rec.Version, rs.Rec.ModuleHash
		h.dropWarm(ctx, rh)
		b := newBatch(rs)
		if _, err := b.push(EvRunUpgraded, &history.Data{FromVersion: from, FromHash: fromHash, Version: lp.p.Version, ModuleHash: lp.p.ModuleHash}); err != nil {
			return err
		}
		rs.Rec.Version, rs.Rec.ModuleHash = lp.p.Version, lp.p.ModuleHash
		d := rs.Detail
		d.Stalled = ""
		if err := h.commit(ctx, rh, b, &d); err != nil {
			return err
		}
		return h.drive(ctx, rh)
	})
	return info, rep, err
}

// HistoryFormat names the history file format.
const HistoryFormat = history.Format

// History is a run's log with what is needed to replay it elsewhere
// (package history describes the file).
type History = history.File

// HistoryEvent is an event in a history file.
type HistoryEvent = history.Event

// ReadHistory reads a history file, compressed or not. Malformed input is
// an error wrapping ErrBadHistory.
func ReadHistory(r io.Reader) (*History, error) { return history.Read(r) }

// DescribeEvent renders one event as a line of a run's timeline.
func DescribeEvent(e store.Event) string { return history.Describe(e) }
