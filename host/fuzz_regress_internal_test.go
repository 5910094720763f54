package host

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/sandflow/sandflow/abi"
)

// Regression tests for the bugs FuzzWorkflowOp and FuzzAwaitPayload found.
// Each fails until its bug is fixed; the inputs are also in the fuzz
// corpora (testdata/fuzz/FuzzWorkflowOp/crash-*, FuzzAwaitPayload/crash-*).
// fuzzCheckOps runs an op sequence live, replays it, commits it, and checks
// the properties listed on FuzzWorkflowOp.

// TestRegressionSleepUntilOutOfRange: BUG. perform (workflow.go, OpSleep)
// takes any int64 "until" and records time.UnixMilli(until) as the timer's
// fireAt; for a year outside 0-9999 json.Marshal of the event fails and
// mkEvent (events.go) panics, inside the host function a guest called.
func TestRegressionSleepUntilOutOfRange(t *testing.T) {
	env := newFuzzOpsEnv(t)
	for _, until := range []string{"9223372036854775807", "-9223372036854775808", "253402300800000" /* 10000-01-01 */} {
		t.Run(until, func(t *testing.T) {
			fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpSleep, "", `{"until":`+until+`}`)})
		})
	}
}

// TestRegressionSleepUntilPastStoreRange: BUG. A sleep "until" a time
// after 2262 is accepted and recorded, but the store keeps timers only for
// the years 1678-2262: committing the activation fails with ErrBadBatch
// (a host error, not a guest one), the batch is dropped, and every later
// activation of the run does the same, so the run never moves again.
func TestRegressionSleepUntilPastStoreRange(t *testing.T) {
	env := newFuzzOpsEnv(t)
	for _, until := range []string{"10000000000000" /* 2286 */, "253402300799000" /* 9999-12-31 */} {
		t.Run(until, func(t *testing.T) {
			fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpSleep, "", `{"until":`+until+`}`)})
		})
	}
}

// TestRegressionNamedNonStepOpBreaksReplay: BUG. A recorded op other than
// step may come with a name (the ABI says it is empty, but nothing refuses
// one). Live, the host performs the op and records its event without the
// name; on replay Op compares the guest's name with the recorded "" and
// ends the deterministic guest with a NonDeterminismError.
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

// TestRegressionNonUTF8OpNameBreaksReplay: BUG. A step whose name is not
// UTF-8 is refused, and the refusal is recorded (op_refused) with the
// name; json.Marshal replaces the invalid bytes with U+FFFD, so on replay
// the guest's name no longer matches the log and the run fails with a
// NonDeterminismError though the guest did the same thing.
func TestRegressionNonUTF8OpNameBreaksReplay(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{fop(abi.OpStep, "\xff", `{"input":1}`)})
}

// TestRegressionHookNextAnswerChangesOnReplay: BUG. hook_next answers
// pending live; a hook_dispose later in the same activation settles that
// future as rejected with byGuest set (state.go, EvHookDisposed), and
// visible() shows byGuest settlements to the whole activation. On replay
// the same hook_next is answered rejected: the guest sees a different
// answer to the same op (Future.Done() differs in the Go SDK).
func TestRegressionHookNextAnswerChangesOnReplay(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookNext, "", `{"hook":1}`),
		fop(abi.OpHookDispose, "", `{"hook":1}`),
	})
}

// TestRegressionHookTokenTwiceInOneRun: BUG. A second hook_create of a
// token the run already holds is not a conflict: ClaimHook overwrites the
// claim with the new hook id, so the first hook, still live, can never
// receive a payload, and its hook_next futures never settle.
func TestRegressionHookTokenTwiceInOneRun(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
	})
}

// TestRegressionHookTokenReusedAfterDispose: BUG. hook_create claims its
// token in the store at once, but a hook_dispose's release waits for the
// commit. Dispose a hook and create another with the same token in one
// activation: the new claim is made, then the commit releases the token,
// so the new, live hook has no token and ResumeHook cannot reach it.
func TestRegressionHookTokenReusedAfterDispose(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
		fop(abi.OpHookDispose, "", `{"hook":1}`),
		fop(abi.OpHookCreate, "", `{"token":"t"}`),
	})
}

// TestRegressionTimerOutlivesCompletedRun: BUG. A sleep and a complete in
// one activation put the sleep's timer (PutTimers) and, from
// batch.finish, its deletion (DeleteTimers) in the same batch; the store
// applies deletions before puts, so the timer of the ended run stays in the
// index until it comes due (up to 100 years).
func TestRegressionTimerOutlivesCompletedRun(t *testing.T) {
	env := newFuzzOpsEnv(t)
	fuzzCheckOps(t, env, false, []fuzzOp{
		fop(abi.OpSleep, "", `{"ms":60000}`),
		fop(abi.OpComplete, "", `{}`),
	})
}

// TestRegressionAwaitOnRefusedOp: BUG. A refused op takes a position but
// makes no future (its answer names future 0). await checks only the kind
// recorded at a position, so awaiting a refused step's position is
// accepted and suspends on a future that can never settle: the run waits
// forever instead of the guest getting not_found or bad_request.
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

// TestRegressionHookClaimOutlivesFailedActivation: BUG. hook_create claims
// its token in the store before the activation commits. When the
// activation fails instead (the guest traps, say), failActivation drops
// the batch and fails the run from the reloaded state, which has no such
// hook, so nothing releases the claim: the token stays held by a failed
// run, and every other run's hook on it is a conflict, for good.
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
	if !rh.rs.status.Terminal() {
		t.Fatalf("the run is %s after a failed activation", rh.rs.status)
	}
	holder, err := env.st.ClaimHook(ctx, "order-123", "another-run", 1)
	if err != nil {
		t.Fatal(err)
	}
	if holder != "" {
		t.Fatalf("token order-123 is still held by %s, whose run failed without the hook in its log", holder)
	}
}
