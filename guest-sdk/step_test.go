//go:build !wasip1

package sandflow

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
)

type sentOp struct {
	kind    abi.OpKind
	name    string
	payload string
}

// fakeHost answers step ops: from a log of recorded results while
// recorded > 0 (a replay), and as a live host does after it.
type fakeHost struct {
	recorded int
	sent     []sentOp
}

func (h *fakeHost) op(kind abi.OpKind, name string, payload []byte) []byte {
	h.sent = append(h.sent, sentOp{kind, name, string(payload)})
	answer := func(st abi.Status, body string) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(st))
		b = binary.LittleEndian.AppendUint32(b, 7)
		return append(b, body...)
	}
	if h.recorded > 0 {
		h.recorded--
		return answer(abi.StatusOK, "41")
	}
	if kind&abi.OpFlagIfRecorded != 0 {
		return answer(abi.StatusLive, "")
	}
	return answer(abi.StatusOK, "42")
}

func withFakeHost(t *testing.T, h *fakeHost) {
	hostForTest = h.op
	t.Cleanup(func() { hostForTest = nil })
}

// A step whose input is an integer or a bool is sent first without its
// payload, with the if-recorded flag: a replayed step costs no encoding,
// and a live one goes again with its payload. Other inputs are sent once,
// encoded, on replay too.
func TestStepProbesScalarInputs(t *testing.T) {
	intStep := &Step[int, int]{name: "inc"}
	retried := DefineStep("probe-retried", func(sc *StepContext, v int64) (int, error) { return 0, nil },
		MaxAttempts(5), Backoff(time.Second, time.Minute, 2))
	type pair struct{ A, B int }
	structStep := &Step[pair, int]{name: "sum"}

	h := &fakeHost{recorded: 1}
	withFakeHost(t, h)
	if v, err := intStep.Run(&Context{}, 5); err != nil || v != 41 {
		t.Fatalf("replayed step: %d %v", v, err)
	}
	want := []sentOp{{abi.OpStep | abi.OpFlagAwait | abi.OpFlagIfRecorded, "inc", ""}}
	if len(h.sent) != 1 || h.sent[0] != want[0] {
		t.Fatalf("replayed step sent %+v, want %+v", h.sent, want)
	}

	h = &fakeHost{}
	withFakeHost(t, h)
	if v, err := intStep.Run(&Context{}, 5); err != nil || v != 42 {
		t.Fatalf("live step: %d %v", v, err)
	}
	want = append(want, sentOp{abi.OpStep | abi.OpFlagAwait, "inc", `{"input":5}`})
	if len(h.sent) != 2 || h.sent[0] != want[0] || h.sent[1] != want[1] {
		t.Fatalf("live step sent %+v, want %+v", h.sent, want)
	}

	// The longest payload of a scalar input, with a retry policy, fits
	// the buffer as it is: a live step allocates as its replay does.
	h = &fakeHost{}
	withFakeHost(t, h)
	before := cap(stepBuf)
	if _, err := retried.Run(&Context{}, math.MinInt64); err != nil {
		t.Fatal(err)
	}
	if len(h.sent) != 2 || h.sent[1].payload != `{"input":-9223372036854775808,"retry":`+string(retried.retryJSON)+`}` {
		t.Fatalf("live step with a retry policy sent %+v", h.sent)
	}
	if cap(stepBuf) != before {
		t.Errorf("the step buffer grew from %d to %d bytes", before, cap(stepBuf))
	}

	for _, recorded := range []int{1, 0} {
		h = &fakeHost{recorded: recorded}
		withFakeHost(t, h)
		if _, err := structStep.Run(&Context{}, pair{1, 2}); err != nil {
			t.Fatal(err)
		}
		want := sentOp{abi.OpStep | abi.OpFlagAwait, "sum", `{"input":{"A":1,"B":2}}`}
		if len(h.sent) != 1 || h.sent[0] != want {
			t.Errorf("struct input, recorded %d: sent %+v, want %+v", recorded, h.sent, want)
		}
	}
}
