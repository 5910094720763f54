package history

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// Describe renders one event as a line of a run's timeline.
func Describe(e store.Event) string {
	d, err := Decode(e)
	if err != nil {
		return fmt.Sprintf("%s (undecodable: %v)", e.Kind, err)
	}
	op := ""
	if d.Op != 0 {
		op = fmt.Sprintf("op %d ", d.Op)
	}
	switch e.Kind {
	case KindRunCreated:
		return fmt.Sprintf("run created: tool %s (plugin %s v%d, module %s), input %s", d.Tool, d.Plugin, d.Version, ShortHash(d.ModuleHash), clip(d.Input))
	case KindRunResumed:
		if d.Activation == 0 {
			return "activation 0: started"
		}
		return fmt.Sprintf("activation %d: resumed", d.Activation)
	case KindStepStarted:
		if d.Attempt > 1 {
			return fmt.Sprintf("%sstep %s: attempt %d started", op, d.Name, d.Attempt)
		}
		return fmt.Sprintf("%sstep %s started with %s", op, d.Name, clip(d.Input))
	case KindStepCompleted:
		return fmt.Sprintf("%sstep completed (attempt %d): %s", op, d.Attempt, clip(d.Result))
	case KindStepFailed:
		msg := fmt.Sprintf("%sstep attempt %d failed: %s", op, d.Attempt, errText(d))
		if d.RetryAt != nil {
			return msg + "; retry at " + d.RetryAt.Format(time.RFC3339)
		}
		return msg + "; no more attempts"
	case KindTimerSet:
		if d.Immediate {
			return fmt.Sprintf("%ssleep: already due", op)
		}
		return fmt.Sprintf("%ssleep until %s", op, d.FireAt.Format(time.RFC3339))
	case KindTimerFired:
		return fmt.Sprintf("%stimer fired", op)
	case KindAskOpened:
		return describeAskOpened(d, op)
	case KindAskSettled:
		return describeAskSettled(d, op)
	case KindHookCreated:
		return describeHookCreated(d, op)
	case KindHookNext:
		return fmt.Sprintf("%swaits for the next payload of hook %d", op, d.Hook)
	case KindHookReceived:
		return fmt.Sprintf("hook %d received payload %d: %s", d.Hook, d.Index, clip(d.Payload))
	case KindCallReceived:
		return fmt.Sprintf("call %d (%s) received: %s", d.Index, d.CallID, clip(d.Input))
	case KindAbortRequested:
		return fmt.Sprintf("abort %d requested: %s", d.Index, d.Reason)
	case KindSignal:
		return fmt.Sprintf("%swaits for an abort", op)
	case KindReceive:
		return fmt.Sprintf("%swaits for the next call", op)
	case KindReplied:
		return fmt.Sprintf("%sreplied to %d call(s): %s", op, d.Answered, clip(d.Payload))
	case KindHookDisposed:
		return fmt.Sprintf("%shook %d disposed", op, d.Hook)
	case KindProgress:
		return fmt.Sprintf("%sprogress: %s", op, clip(d.Value))
	case KindOutput:
		return describeOutput(d)
	case KindRunCompleted:
		return fmt.Sprintf("%srun completed: %s", op, clip(d.Result))
	case KindRunFailed:
		return fmt.Sprintf("%srun failed: %s", op, errText(d))
	case KindRunCancelled:
		return "run cancelled: " + d.Reason
	case KindRunUpgraded:
		return fmt.Sprintf("run upgraded from version %d (module %s) to version %d (module %s)", d.FromVersion, ShortHash(d.FromHash), d.Version, ShortHash(d.ModuleHash))
	case KindAgentSent:
		return fmt.Sprintf("%sagent %s: sent %s", op, d.Name, clip(d.Input))
	case KindAgentSettled:
		return describeAgentSettled(d, op)
	case KindWebhookResponded:
		return fmt.Sprintf("%swebhook %d request %d answered with status %d", op, d.Hook, d.Index, d.Response.Status)
	case KindOpRefused:
		return fmt.Sprintf("%s%s %s refused: %s", op, d.Kind, d.Name, errText(d))
	}
	return e.Kind
}

// describeAskOpened is Describe of an ask_opened event.
func describeAskOpened(d *Data, op string) string {
	var req struct{ Prompt string }
	_ = json.Unmarshal(d.Request, &req)
	if d.Answer != nil {
		return fmt.Sprintf("%squestion %q: %s at once", op, firstLine(req.Prompt), d.Answer.Status)
	}
	return fmt.Sprintf("%squestion %s opened: %q", op, d.AskID, firstLine(req.Prompt))
}

// describeAskSettled is Describe of an ask_settled event.
func describeAskSettled(d *Data, op string) string {
	a := d.Answer
	switch {
	case a == nil:
		return op + "question settled"
	case a.OptionID != "":
		return fmt.Sprintf("%squestion %s answered: %s", op, d.AskID, a.OptionID)
	case a.Text != "":
		return fmt.Sprintf("%squestion %s answered: %q", op, d.AskID, clip([]byte(a.Text)))
	}
	return fmt.Sprintf("%squestion %s %s", op, d.AskID, a.Status)
}

// describeHookCreated is Describe of a hook_created event.
func describeHookCreated(d *Data, op string) string {
	if d.Webhook != nil {
		return fmt.Sprintf("%swebhook created at %s", op, d.URL)
	}
	if d.Conflict != "" {
		return fmt.Sprintf("%shook %s created, but run %s holds the token", op, d.Token, d.Conflict)
	}
	return fmt.Sprintf("%shook %s created", op, d.Token)
}

// describeOutput is Describe of an output event.
func describeOutput(d *Data) string {
	who := "workflow"
	if d.Step != 0 {
		who = fmt.Sprintf("step op %d", d.Step)
	}
	cut := ""
	if d.Cut {
		cut = " [cut at the output limit]"
	}
	return fmt.Sprintf("%s %s: %s%s", who, d.Stream, strings.TrimRight(clip([]byte(d.Data)), "\n"), cut)
}

// describeAgentSettled is Describe of an agent_settled event.
func describeAgentSettled(d *Data, op string) string {
	if d.Agent.Status == abi.AgentFailed && d.Agent.Error != nil {
		return fmt.Sprintf("%sagent turn failed: %s", op, d.Agent.Error.Message)
	}
	if len(d.Agent.Data) > 0 {
		return fmt.Sprintf("%sagent turn %s: %s", op, d.Agent.Status, clip(d.Agent.Data))
	}
	return fmt.Sprintf("%sagent turn %s: %q", op, d.Agent.Status, clip([]byte(d.Agent.Reply)))
}

func errText(d *Data) string {
	if d.Error == nil {
		return "unknown error"
	}
	return d.Error.Type + ": " + firstLine(d.Error.Message)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// clip shortens a value for a one-line display.
func clip(b []byte) string {
	const max = 160
	s := strings.ReplaceAll(string(b), "\n", `\n`)
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// ShortHash is a module hash as timelines and messages show it: its first
// twelve hex digits.
func ShortHash(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
