package host

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/sandflow/sandflow/abi"
)

// Regression cases for inputs FuzzWorkflowOp and FuzzAwaitPayload once
// failed on, each named for the case it covers; the inputs are also in
// the fuzz corpora (testdata/fuzz/FuzzWorkflowOp/crash-*, FuzzAwaitPayload/crash-*).
// fuzzCheckOps runs an op sequence live, replays it, commits it, and checks
// the properties listed on FuzzWorkflowOp.

// A sleep "until" a time whose year is outside 0-9999 is refused, and the
// host function the guest called never panics (an event with such a time
// cannot be encoded).
func TestRegressionSleepUntilOutOfRange(t *testing.T) {
	env := newFuzzOpsEnv(t)
	for _, until := range []string{"9223372036854775807", "-9223372036854775808", "253402300800000" /* 10000-01-01 */} {
		t.Run(until, func(t *testing.T) {
			fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpSleep, "", `{"until":`+until+`}`)})
		})
	}
}

// A sleep "until" a time after the start of 2200 is refused as the guest's
// error: the store keeps timers only up to 2262, and accepting one would
// make every commit of the run fail, so the run would never move again.
func TestRegressionSleepUntilPastStoreRange(t *testing.T) {
	env := newFuzzOpsEnv(t)
	for _, until := range []string{"10000000000000" /* 2286 */, "253402300799000" /* 9999-12-31 */} {
		t.Run(until, func(t *testing.T) {
			fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpSleep, "", `{"until":`+until+`}`)})
		})
	}
}

// A recorded op other than step or agent that comes with a name (the ABI
// says the name is empty) is refused, and the refusal replays: a
// deterministic guest that sends one gets the same answer on replay, not a
// NonDeterminismError.
func TestRegressionNamedNonStepOpBreaksReplay(t *testing.T) {
	env := newFuzzOpsEnv(t)
	for _, op := range []fuzzOp{
		fop(abi.OpProgress, "x", `1`),
		fop(abi.OpSleep, "x", `{"ms":0}`),
		fop(abi.OpAsk, "x", `{"prompt":"p","display":"text"}`),
		fop(abi.OpHookCreate, "x", `{}`),
		fop(abi.OpComplete, "x", `{}`),
	} {
		t.Run(op.kind.String(), func(t *testing.T) {
			fuzzCheckOps(t, env, false, []fuzzOp{op})
		})
	}
}

// A step whose name is not UTF-8 is refused, and the refusal, recorded
// with the name, replays: the name in the log still matches the guest's,
// so the run does not fail with a NonDeterminismError though the guest did
// the same thing.
func TestRegressionNonUTF8OpNameBreaksReplay(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpStep, "\xff", `{"input":1}`)})
}

// A hook_next answered while live, followed by a hook_dispose in the same
// activation, gets the same answer on replay: the guest sees one answer to
// one op (Future.Done() in the Go SDK) live and on replay.
func TestRegressionHookNextAnswerChangesOnReplay(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookNext, "", `{"hook":1}`),
		fop(abi.OpHookDispose, "", `{"hook":1}`),
	})
}

// A second hook_create of a token the run already holds does not take the
// claim from the first hook, which is still live: the first hook can
// receive payloads and its hook_next futures settle.
func TestRegressionHookTokenTwiceInOneRun(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
	})
}

// A hook disposed and another created on the same token in one activation:
// the new, live hook keeps the token after the commit, so ResumeHook
// reaches it (the dispose's release, applied at the commit, does not
// release the new claim).
func TestRegressionHookTokenReusedAfterDispose(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookDispose, "", `{"hook":1}`),
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
	})
}

// A sleep and a complete in one activation leave no timer behind: the run
// ends, and its sleep's timer is not in the index (where it would stay
// until due, up to 100 years later).
func TestRegressionTimerOutlivesCompletedRun(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpSleep, "", `{"ms":60000}`),
		fop(abi.OpComplete, "", `{}`),
	})
}

// A refused op takes a position but makes no future (its answer names
// future 0): awaiting a refused step's position is refused, not suspended
// on a future that can never settle.
func TestRegressionAwaitOnRefusedOp(t *testing.T) {
	env := newFuzzOpsEnv(t)
	r := env.newRun(t, false)
	defer env.release(t, r.rec.ID, r.rs)
	body, err := fuzzOpCall(t, r.w, abi.OpStep, []byte("a"), []byte(`{"input":`))
	if err != nil || !abi.Status(binary.LittleEndian.Uint32(body)).IsRefusal() {
		t.Fatalf("a malformed step was not refused: %x, %v", body, err)
	}
	req := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(abi.AwaitAll)), 1)
	body, err = fuzzOpCall(t, r.w, abi.OpAwait, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if st := abi.Status(binary.LittleEndian.Uint32(body)); !st.IsRefusal() {
		t.Fatalf("await on the refused op's position answered %s (suspended: %v), want a refusal", st, r.w.suspended)
	}
}

// hook_create claims its token in the store before the activation
// commits; when the activation fails instead (the guest traps, say), the
// claim is released, so the token is not held for good by a failed run
// whose log has no such hook.
func TestRegressionHookClaimOutlivesFailedActivation(t *testing.T) {
	env := newFuzzOpsEnv(t)
	ctx := context.Background()
	r := env.newRun(t, false)
	if _, err := fuzzOpCall(t, r.w, abi.OpHookCreate, nil, []byte(`{"token":"order-123"}`)); err != nil {
		t.Fatal(err)
	}
	rh := &runHandle{id: r.rec.ID, rs: r.rs}
	if err := env.h.failActivation(ctx, rh, r.b, r.w, &GuestError{Message: "trap"}); err != nil {
		t.Fatal(err)
	}
	if !rh.rs.Status.Terminal() {
		t.Fatalf("the run is %s after a failed activation", rh.rs.Status)
	}
	holder, err := env.st.ClaimHook(ctx, "order-123", "another-run", 1)
	if err != nil {
		t.Fatal(err)
	}
	if holder != "" {
		t.Fatalf("token order-123 is still held by %s, whose run failed without the hook in its log", holder)
	}
}
