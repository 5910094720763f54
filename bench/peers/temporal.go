package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SumWorkflow is the Temporal workflow that TemporalReplay replays: it runs
// n activities one after the other, activity i adding one to i, and returns
// the sum of their results, n(n+1)/2.
func SumWorkflow(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
	})
	sum := 0
	for i := range n {
		var r int
		if err := workflow.ExecuteActivity(ctx, AddOne, i).Get(ctx, &r); err != nil {
			return 0, err
		}
		sum += r
	}
	return sum, nil
}

// AddOne is SumWorkflow's activity. A replay never runs it: its results
// come from the history.
func AddOne(_ context.Context, x int) (int, error) { return x + 1, nil }

const (
	temporalTaskQueue = "peers-bench"
	temporalRunID     = "6b3c1a52-0d4e-4c1f-9a57-2f1de0c0a001"
	temporalIdentity  = "peers-bench-worker"

	// The SDK's flag number for SDKFlagProtocolMessageCommand.
	sdkFlagProtocolMessageCommand = 3
)

// SumHistory builds, without a server, the history that a Temporal server
// would have recorded for a completed SumWorkflow(n) whose worker answered
// every workflow task at once: the start, the first workflow task, then per
// activity its scheduled, started and completed events followed by the
// workflow task that reacts to the result, and finally the completion.
//
// Activity IDs are the event IDs of their ActivityTaskScheduled events,
// which is how this SDK version numbers them. The history has 6n+5 events.
func SumHistory(n int) (*historypb.History, error) {
	dc := converter.GetDefaultDataConverter()
	payloads := func(v any) (*commonpb.Payloads, error) { return dc.ToPayloads(v) }
	input, err := payloads(n)
	if err != nil {
		return nil, err
	}

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tq := &taskqueuepb.TaskQueue{Name: temporalTaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}
	events := make([]*historypb.HistoryEvent, 0, 6*n+5)
	// add appends an event of type t; the caller sets its attributes.
	add := func(t enumspb.EventType) *historypb.HistoryEvent {
		id := int64(len(events) + 1)
		e := &historypb.HistoryEvent{
			EventId:   id,
			EventTime: timestamppb.New(start.Add(time.Duration(id) * time.Millisecond)),
			EventType: t,
			TaskId:    1_048_576 + id,
		}
		events = append(events, e)
		return e
	}
	// workflowTask appends a scheduled, started and completed workflow task
	// and returns the completed event's ID.
	workflowTask := func(meta *sdkpb.WorkflowTaskCompletedMetadata) int64 {
		sched := add(enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
		sched.Attributes = &historypb.HistoryEvent_WorkflowTaskScheduledEventAttributes{
			WorkflowTaskScheduledEventAttributes: &historypb.WorkflowTaskScheduledEventAttributes{
				TaskQueue: tq, StartToCloseTimeout: durationpb.New(10 * time.Second), Attempt: 1,
			}}
		started := add(enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED)
		started.Attributes = &historypb.HistoryEvent_WorkflowTaskStartedEventAttributes{
			WorkflowTaskStartedEventAttributes: &historypb.WorkflowTaskStartedEventAttributes{
				ScheduledEventId: sched.EventId, Identity: temporalIdentity,
				RequestId: fmt.Sprintf("wft-%d", sched.EventId),
			}}
		done := add(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
		done.Attributes = &historypb.HistoryEvent_WorkflowTaskCompletedEventAttributes{
			WorkflowTaskCompletedEventAttributes: &historypb.WorkflowTaskCompletedEventAttributes{
				ScheduledEventId: sched.EventId, StartedEventId: started.EventId, Identity: temporalIdentity,
				SdkMetadata: meta,
			}}
		return done.EventId
	}

	add(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED).Attributes = &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
			WorkflowType:           &commonpb.WorkflowType{Name: "SumWorkflow"},
			TaskQueue:              tq,
			Input:                  input,
			WorkflowRunTimeout:     durationpb.New(0),
			WorkflowTaskTimeout:    durationpb.New(10 * time.Second),
			OriginalExecutionRunId: temporalRunID,
			FirstExecutionRunId:    temporalRunID,
			Identity:               temporalIdentity,
			Attempt:                1,
			WorkflowId:             "sum-" + strconv.Itoa(n),
		}}
	// A worker of this SDK version names itself in its first completion
	// and lists the SDK flags it used: at a workflow's start, the one for
	// ordering protocol messages among commands.
	completed := workflowTask(&sdkpb.WorkflowTaskCompletedMetadata{
		LangUsedFlags: []uint32{sdkFlagProtocolMessageCommand},
		SdkName:       "temporal-go",
		SdkVersion:    temporal.SDKVersion,
	})
	sum := 0
	for i := range n {
		in, err := payloads(i)
		if err != nil {
			return nil, err
		}
		out, err := payloads(i + 1)
		if err != nil {
			return nil, err
		}
		sum += i + 1
		sched := add(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
		sched.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityId:                   strconv.FormatInt(sched.EventId, 10),
				ActivityType:                 &commonpb.ActivityType{Name: "AddOne"},
				TaskQueue:                    tq,
				Header:                       &commonpb.Header{},
				Input:                        in,
				ScheduleToCloseTimeout:       durationpb.New(0),
				ScheduleToStartTimeout:       durationpb.New(0),
				StartToCloseTimeout:          durationpb.New(10 * time.Second),
				HeartbeatTimeout:             durationpb.New(0),
				WorkflowTaskCompletedEventId: completed,
				RetryPolicy: &commonpb.RetryPolicy{
					InitialInterval:    durationpb.New(time.Second),
					BackoffCoefficient: 2,
					MaximumInterval:    durationpb.New(100 * time.Second),
				},
			}}
		started := add(enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED)
		started.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{
			ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{
				ScheduledEventId: sched.EventId, Identity: temporalIdentity,
				RequestId: fmt.Sprintf("act-%d", sched.EventId), Attempt: 1,
			}}
		add(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED).Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
				Result: out, ScheduledEventId: sched.EventId, StartedEventId: started.EventId,
				Identity: temporalIdentity,
			}}
		completed = workflowTask(nil)
	}
	result, err := payloads(sum)
	if err != nil {
		return nil, err
	}
	add(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED).Attributes = &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{
		WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{
			Result: result, WorkflowTaskCompletedEventId: completed,
		}}
	return &historypb.History{Events: events}, nil
}

// TemporalReplayer replays SumWorkflow histories in process, with no
// server, through the Temporal Go SDK's workflow replayer. It is not safe
// for concurrent use.
type TemporalReplayer struct {
	r      worker.WorkflowReplayer
	logger tlog.Logger
}

// NewTemporalReplayer returns a replayer with SumWorkflow registered and
// the SDK's logging discarded, so that a replay writes nothing.
func NewTemporalReplayer() *TemporalReplayer {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflow(SumWorkflow)
	return &TemporalReplayer{r: r, logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))}
}

// Replay replays h once. It returns the SDK's error when the workflow code
// does not reproduce the history (a non-determinism failure or a result
// that differs from the recorded completion).
func (t *TemporalReplayer) Replay(h *historypb.History) error {
	return t.r.ReplayWorkflowHistory(t.logger, h)
}

// Result is the result that the workflow code returned in the last
// replay. The replayer checks only that the code completes where the
// history does, not with what, so this is how a test sees that the
// activities' results were read from the history.
func (t *TemporalReplayer) Result() (int, error) {
	// The SDK's replayer has this method, but its interface does not.
	r, ok := t.r.(interface{ GetWorkflowResult(string, any) error })
	if !ok {
		return 0, errors.New("the Temporal replayer does not give workflow results")
	}
	var sum int
	err := r.GetWorkflowResult("", &sum)
	return sum, err
}

// TemporalReplay benchmarks Temporal's Go SDK replaying, in process with
// no server, the whole history of a SumWorkflow that ran n activities:
// one op is one replay of the 6n+5 events from the start to the
// completion. Building the history and a first replay are not timed.
func TemporalReplay(n int) func(b *testing.B) {
	return func(b *testing.B) {
		h, err := SumHistory(n)
		if err != nil {
			b.Fatal(err)
		}
		r := NewTemporalReplayer()
		// One replay before timing: the first in a process pays the SDK's
		// one-time setup (tens of milliseconds), which would swamp small n.
		if err := r.Replay(h); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := r.Replay(h); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(h.Events)), "events")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*max(n, 1)), "ns/activity")
	}
}
