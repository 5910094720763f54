package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// The steps of a turn's run.
const (
	stepModel = "model"
	// A tool call's step is "tool:" and the name the model called.
	stepToolPrefix = "tool:"
	// The signatures of approvals: checking a history's, making a
	// turn's.
	stepVerifyApprovals = "approvals:verify"
	stepSignApprovals   = "approvals:sign"
)

// message is a chat message as the run records it.
type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	Refusal    string     `json:"refusal,omitempty"`
	ToolCalls  []toolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
}

type toolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// modelInput is a model step's input: the conversation so far, and
// which tools the model is offered.
type modelInput struct {
	Messages     []message       `json:"messages"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Tools are the names of the tools offered (search_tools among them
	// while some are deferred).
	Tools []string `json:"tools,omitempty"`
}

// searchToolsName is the built-in tool that finds deferred tools.
const searchToolsName = "search_tools"

// offered is the tools the model sees now: those not hidden from this
// turn, and of the deferred ones those found; search_tools while some
// are still to find.
func offered(a *LoopAgent, st *loopState, delegated bool) []string {
	var out []string
	left := false
	for _, t := range a.Tools {
		switch n := t.name(); {
		case delegated && t.HiddenFromDelegates:
		case t.Deferred && !st.found[n]:
			left = true
		default:
			out = append(out, n)
		}
	}
	if left {
		out = append(out, searchToolsName)
	}
	return out
}

// searchTools answers a search_tools call: the deferred tools whose name
// or description holds the query, which the model is offered from now on.
func searchTools(a *LoopAgent, st *loopState, delegated bool, args string) string {
	var in struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal([]byte(args), &in)
	q := strings.ToLower(strings.TrimSpace(in.Query))
	var found []map[string]string
	for _, t := range a.Tools {
		if !t.Deferred || delegated && t.HiddenFromDelegates || q == "" ||
			!strings.Contains(strings.ToLower(t.name()), q) && !strings.Contains(strings.ToLower(t.Description), q) {
			continue
		}
		st.found[t.name()] = true
		found = append(found, map[string]string{"name": t.name(), "description": t.Description})
	}
	b, _ := json.Marshal(map[string]any{"found": found})
	return string(b)
}

// label is what a call is shown as.
func label(t LoopTool, c toolCall) string {
	if t.Label == "" {
		return c.Name
	}
	var in map[string]any
	_ = json.Unmarshal([]byte(c.Arguments), &in)
	out := strings.ReplaceAll(t.Label, "{name}", c.Name)
	for k, v := range in {
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		out = strings.ReplaceAll(out, "{"+k+"}", s)
	}
	return out
}

// modelOutput is the part of a tool's output the model is given.
func modelOutputOf(t LoopTool, out json.RawMessage) string {
	if t.ModelOutput == "" {
		return string(out)
	}
	var v any
	if json.Unmarshal(out, &v) != nil {
		return string(out)
	}
	for _, tok := range strings.Split(t.ModelOutput[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i := -1
			fmt.Sscanf(tok, "%d", &i)
			if i < 0 || i >= len(x) {
				v = nil
			} else {
				v = x[i]
			}
		default:
			v = nil
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// modelOutput is a model step's result.
type modelOutput struct {
	Message      message `json:"message"`
	FinishReason string  `json:"finishReason"`
	Usage        Usage   `json:"usage"`
	// Approvals are the approval settings the manifests of the tools
	// offered declared, by the model's name of the tool, for those the
	// agent does not set: the step records them, so a replay decides the
	// same whatever the manifests say by then.
	Approvals map[string]*plugins.ManifestApproval `json:"approvals,omitempty"`
}

// toolInput is a tool step's input.
type toolInput struct {
	CallID    string `json:"callId"`
	Arguments string `json:"arguments"`
}

// toolOutput is a tool step's result: the tool's result, or an error the
// model is told (so it can correct its call).
type toolOutput struct {
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Task is the task a task tool's call started: Output is then its
	// receipt, and the result comes later (see looptasks.go).
	Task string `json:"task,omitempty"`
}

func fatal(format string, args ...any) *abi.ErrorObject {
	return &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: fmt.Sprintf(format, args...)}
}

// runLoop is the body of a turn's run. It sees only its input and what
// its steps recorded, so a replay takes the same path.
func runLoop(g *guest, a *LoopAgent) (json.RawMessage, *abi.ErrorObject) {
	var in loopInput
	if err := json.Unmarshal(g.input(), &in); err != nil {
		return nil, fatal("the turn's input: %v", err)
	}
	var msgs []message
	if a.Instructions != "" {
		msgs = append(msgs, message{Role: "system", Content: a.Instructions})
	}
	st := &loopState{approvedOnce: map[string]bool{}, found: map[string]bool{}}
	var carried []Approval
	for _, x := range in.History {
		for _, m := range x.Messages {
			msgs = append(msgs, message{Role: "user", Content: m})
		}
		msgs = append(msgs, message{Role: "assistant", Content: x.Reply})
		carried = append(carried, x.Approvals...)
	}
	if len(carried) > 0 {
		f := g.step(stepVerifyApprovals, carried, &abi.RetryPolicy{MaxAttempts: 3})
		g.await(f)
		if f.err != nil {
			return nil, f.err
		}
		var v verdict
		if err := json.Unmarshal(f.val, &v); err != nil {
			return nil, fatal("checking the approvals: %v", err)
		}
		if v.Bad != "" {
			return nil, &abi.ErrorObject{Type: ApprovalSignatureError, Message: v.Bad}
		}
		for _, ap := range carried {
			st.approvedOnce[ap.Tool] = true
		}
	}
	msgs = append(msgs, message{Role: "user", Content: in.Message})
	var stopWhen func(LoopStep) bool
	if live, ok := g.i.m.l.agent(a.Name); ok {
		stopWhen = live.StopWhen
	}
	res := loopResult{Stop: "answered"}
	for {
		res.Steps++
		if st.tasks {
			msgs = deliverTaskResults(g, st, msgs, false)
		}
		f := g.step(stepModel, modelInput{Messages: msgs, OutputSchema: in.OutputSchema, Tools: offered(a, st, in.Delegated)}, a.ModelRetry)
		g.await(f)
		if f.err != nil {
			return nil, f.err
		}
		var out modelOutput
		if err := json.Unmarshal(f.val, &out); err != nil {
			return nil, fatal("a model step's result: %v", err)
		}
		res.Usage.add(out.Usage)
		m := out.Message
		msgs = append(msgs, m)
		switch {
		case m.Refusal != "":
			return nil, fatal("the model refused: %s", m.Refusal)
		case out.FinishReason == "length":
			return nil, fatal("the reply was cut at the model's output limit")
		case out.FinishReason == "content_filter":
			return nil, fatal("the provider's content filter stopped the reply")
		}
		res.Reply = m.Content
		if len(m.ToolCalls) == 0 {
			if n := len(msgs); st.tasks && res.Steps < a.maxSteps() {
				// The turn does not end while its tasks work: it waits
				// for a result and gives it to the model.
				if msgs = deliverTaskResults(g, st, msgs, true); len(msgs) > n {
					continue
				}
			}
			break
		}
		msgs = append(msgs, runToolCalls(g, a, st, in.Delegated, m.ToolCalls, out.Approvals)...)
		step := LoopStep{Number: res.Steps, Text: m.Content}
		for _, c := range m.ToolCalls {
			step.ToolCalls = append(step.ToolCalls, c.Name)
		}
		if slices.ContainsFunc(step.ToolCalls, func(n string) bool {
			t, ok := a.tool(n)
			return slices.Contains(a.StopWhenToolCalled, n) || ok && t.EndsTurn
		}) {
			res.Stop = "tool_called"
			break
		}
		if stopWhen != nil && stopWhen(step) {
			res.Stop = "stop_when"
			break
		}
		if res.Steps >= a.maxSteps() {
			res.Stop = "step_limit"
			g.progress(map[string]any{"warning": fmt.Sprintf("the loop stopped at its step limit of %d with the model still calling tools", a.maxSteps())})
			break
		}
	}
	if len(st.approved) > 0 {
		f := g.step(stepSignApprovals, st.approved, &abi.RetryPolicy{MaxAttempts: 3})
		g.await(f)
		if f.err != nil {
			return nil, f.err
		}
		if err := json.Unmarshal(f.val, &res.Approvals); err != nil {
			return nil, fatal("the signed approvals: %v", err)
		}
	}
	if len(in.OutputSchema) > 0 {
		text := strings.TrimSpace(res.Reply)
		if !json.Valid([]byte(text)) {
			return nil, &abi.ErrorObject{Type: abi.AgentErrBadOutput, Message: fmt.Sprintf("the structured reply is not JSON: %.200s", text)}
		}
		res.Data = json.RawMessage(text)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fatal("%v", err)
	}
	return b, nil
}

// loopState is what a turn's body keeps across its steps besides the
// conversation.
type loopState struct {
	approvedOnce map[string]bool // tools with policy once approved this session
	approved     []Approval      // the calls a person approved this turn
	found        map[string]bool // deferred tools search_tools found
	tasks        bool            // a task tool's task may still report back
}

// runToolCalls runs a step's tool calls, at most ToolCallConcurrency at a
// time, and returns the tool messages in the order of the calls. A call
// that needs approval is asked about first; a denied one gets the
// refusal as its result.
func runToolCalls(g *guest, a *LoopAgent, st *loopState, delegated bool, calls []toolCall, manifest map[string]*plugins.ManifestApproval) []message {
	out := make([]message, len(calls))
	batch := a.ToolCallConcurrency
	if batch <= 0 {
		batch = len(calls)
	}
	for start := 0; start < len(calls); start += batch {
		group := calls[start:min(start+batch, len(calls))]
		fs := make([]*future, len(group))
		refused := make([]string, len(group))
		offer := offered(a, st, delegated)
		for i, c := range group {
			t, ok := a.tool(c.Name)
			if c.Name == searchToolsName && slices.Contains(offer, c.Name) {
				refused[i] = "-" + searchTools(a, st, delegated, c.Arguments)
				continue
			}
			if !ok || !slices.Contains(offer, c.Name) {
				continue // answered below without a step
			}
			g.progress(map[string]string{"toolCall": label(t, c)})
			pt := t
			if ma := manifest[c.Name]; ma != nil {
				pt.Approval, pt.ApprovalRules = ma.Policy, ma.Rules
			}
			if p := pt.policy(c.Arguments); p == ApprovalAlways || p == ApprovalOnce && !st.approvedOnce[c.Name] {
				ok, why := askApproval(g, a.Name, label(t, c), c)
				if !ok {
					refused[i] = why
					continue
				}
				if p == ApprovalOnce {
					st.approvedOnce[c.Name] = true
				}
				st.approved = append(st.approved, Approval{Tool: c.Name, CallID: c.ID, Arguments: c.Arguments})
			}
			fs[i] = g.step(stepToolPrefix+c.Name, toolInput{CallID: c.ID, Arguments: c.Arguments}, &abi.RetryPolicy{MaxAttempts: 3})
		}
		for i, c := range group {
			content := "refused: " + refused[i]
			switch {
			case strings.HasPrefix(refused[i], "-"): // search_tools' answer
				content = refused[i][1:]
			case refused[i] == "":
				t, _ := a.tool(c.Name)
				var task bool
				content, task = toolContent(g, fs[i], t, c)
				st.tasks = st.tasks || task
			}
			out[start+i] = message{Role: "tool", ToolCallID: c.ID, Content: content}
		}
	}
	return out
}

// toolContent waits for a tool call's step and says what the model is
// told of it.
func toolContent(g *guest, f *future, t LoopTool, c toolCall) (string, bool) {
	if f == nil {
		return fmt.Sprintf("error: there is no tool called %q", c.Name), false
	}
	g.await(f)
	if f.err != nil {
		return "error: " + f.err.Message, false
	}
	var o toolOutput
	if err := json.Unmarshal(f.val, &o); err != nil {
		return "error: " + err.Error(), false
	}
	if o.Error != "" {
		return "error: " + o.Error, false
	}
	if o.Task != "" {
		var text string
		_ = json.Unmarshal(o.Output, &text)
		return text, true
	}
	return modelOutputOf(t, o.Output), false
}

// attempt runs one step attempt of a turn's run.
func (l *Loop) attempt(ctx context.Context, a *LoopAgent, in abi.StepInput) (json.RawMessage, *abi.ErrorObject) {
	h, err := l.hostOtherThan(ctx, nil)
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	var out any
	var eo *abi.ErrorObject
	switch {
	case in.Name == stepModel:
		out, eo = l.modelStep(ctx, h, a, in)
	case strings.HasPrefix(in.Name, stepToolPrefix):
		out, eo = l.toolStep(ctx, h, a, in)
	case in.Name == stepTaskResults:
		out, eo = l.taskResultsStep(ctx, in)
	case in.Name == stepVerifyApprovals:
		out, eo = l.verifyStep(a, in)
	case in.Name == stepSignApprovals:
		out, eo = l.signStep(a, in)
	default:
		return nil, fatal("a loop agent has no step %q", in.Name)
	}
	if eo != nil {
		return nil, eo
	}
	b, merr := json.Marshal(out)
	if merr != nil {
		return nil, fatal("%v", merr)
	}
	return b, nil
}

// modelStep sends the conversation to the model.
func (l *Loop) modelStep(ctx context.Context, h *host.Host, a *LoopAgent, in abi.StepInput) (any, *abi.ErrorObject) {
	var mi modelInput
	if err := json.Unmarshal(in.Input, &mi); err != nil {
		return nil, fatal("the model step's input: %v", err)
	}
	model := a.Model
	if model == "" {
		model = l.Model
	}
	if model == "" {
		return nil, fatal("agent %s: no model is configured", a.Name)
	}
	params := openai.ChatCompletionNewParams{Model: model, User: openai.String(in.RunID)}
	for _, m := range mi.Messages {
		params.Messages = append(params.Messages, m.param())
	}
	manifests, err := manifestApprovals(ctx, h, a)
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	approvals := map[string]*plugins.ManifestApproval{}
	tools, err := l.toolParams(ctx, h, a, mi.Tools, manifests, approvals)
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	params.Tools = tools
	if len(mi.OutputSchema) > 0 {
		params.ResponseFormat = responseFormat(mi.OutputSchema)
	}
	timeout := durationOr(time.Duration(a.ModelTimeoutSeconds)*time.Second, defaultModelTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	e := l.Endpoint
	e.MaxRetries = -1 // the step is retried instead, durably
	var resp *openai.ChatCompletion
	if a.Stream {
		resp, err = e.stream(cctx, params, in.RunID+":"+in.StepID, func(d string) {
			session.Publish(h, in.RunID, session.Event{Type: session.EvModelDelta, Step: in.StepID, Delta: d})
		})
	} else {
		resp, err = e.complete(cctx, params, in.RunID+":"+in.StepID)
	}
	if err != nil {
		var pe *ProviderError
		switch {
		case errors.As(err, &pe) && !pe.Retryable:
			return nil, fatal("agent %s: %v", a.Name, err)
		case errors.Is(err, errNoBaseURL):
			return nil, fatal("agent %s: %v", a.Name, err)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: fmt.Sprintf("agent %s: the model did not answer within %s", a.Name, timeout)}
		}
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: fmt.Sprintf("agent %s: %v", a.Name, err)}
	}
	if len(resp.Choices) == 0 {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: "the provider answered with no choices"}
	}
	c := resp.Choices[0]
	out := modelOutput{FinishReason: c.FinishReason, Usage: Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens, TotalTokens: resp.Usage.TotalTokens},
		Message: message{Role: "assistant", Content: c.Message.Content, Refusal: c.Message.Refusal}}
	if len(approvals) > 0 {
		out.Approvals = approvals
	}
	for _, tc := range c.Message.ToolCalls {
		if tc.Type != "function" {
			continue
		}
		out.Message.ToolCalls = append(out.Message.ToolCalls, toolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out, nil
}

// param is the message as the client sends it.
func (m message) param() openai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case "system":
		return openai.SystemMessage(m.Content)
	case "tool":
		return openai.ToolMessage(m.Content, m.ToolCallID)
	case "assistant":
		var p openai.ChatCompletionAssistantMessageParam
		if m.Content != "" {
			p.Content.OfString = openai.String(m.Content)
		}
		if m.Refusal != "" {
			p.Refusal = openai.String(m.Refusal)
		}
		for _, c := range m.ToolCalls {
			p.ToolCalls = append(p.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: c.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments}}})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &p}
	}
	return openai.UserMessage(m.Content)
}

// agentToolSchema is the input of an agent called as a tool.
var agentToolSchema = map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string", "description": "what to ask the agent"}}, "required": []string{"message"}}

// toolParams are the agent's tools as the model sees them.
func (l *Loop) toolParams(ctx context.Context, h *host.Host, a *LoopAgent, names []string, manifests map[string]*plugins.ManifestApproval, approvals map[string]*plugins.ManifestApproval) ([]openai.ChatCompletionToolUnionParam, error) {
	if len(names) == 0 {
		return nil, nil
	}
	list, err := h.Tools(ctx)
	if err != nil {
		return nil, err
	}
	var out []openai.ChatCompletionToolUnionParam
	for _, t := range a.Tools {
		if !slices.Contains(names, t.name()) {
			continue
		}
		if t.Tool != "" && t.Approval == "" && len(t.ApprovalRules) == 0 {
			if ma := manifests[t.Tool]; ma != nil {
				approvals[t.name()] = ma
			}
		}
		fd := shared.FunctionDefinitionParam{Name: t.name()}
		desc := t.Description
		if t.Agent != "" {
			fd.Parameters = agentToolSchema
			if desc == "" {
				desc = "Ask the agent " + t.Agent
			}
		} else {
			i := slices.IndexFunc(list, func(x host.Tool) bool { return x.Name == t.Tool })
			if i < 0 {
				continue // not on this host (any more): the model does not see it
			}
			var schema map[string]any
			if err := json.Unmarshal(list[i].InputSchema, &schema); err != nil {
				return nil, fmt.Errorf("tool %s: its input schema: %v", t.Tool, err)
			}
			fd.Parameters = schema
			if desc == "" {
				desc = list[i].Description
			}
		}
		if desc != "" {
			fd.Description = openai.String(desc)
		}
		out = append(out, openai.ChatCompletionFunctionTool(fd))
	}
	if slices.Contains(names, searchToolsName) {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: searchToolsName,
			Description: openai.String("Find more tools by what they do; the tools found can be called from then on."),
			Parameters:  map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []string{"query"}}}))
	}
	return out, nil
}

// toolStep runs a tool call, and publishes its start and end to the
// sessions that run the turn (tool.started, tool.settled).
func (l *Loop) toolStep(ctx context.Context, h *host.Host, a *LoopAgent, in abi.StepInput) (any, *abi.ErrorObject) {
	var ti toolInput
	if err := json.Unmarshal(in.Input, &ti); err != nil {
		return nil, fatal("the tool step's input: %v", err)
	}
	name := strings.TrimPrefix(in.Name, stepToolPrefix)
	tc := session.ToolCall{ID: ti.CallID, Name: name, RunID: stepRunID(in.RunID, in.StepID)}
	if t, ok := a.tool(name); ok && t.Agent != "" {
		tc.RunID = TurnRunID(delegatedTurnPrefix + tc.RunID)
	}
	session.Publish(h, in.RunID, session.Event{Type: session.EvToolStarted, Step: in.StepID, ToolCall: &tc})
	out, eo := l.runTool(ctx, h, a, in, name, ti)
	tc.Status = session.Completed
	switch o, _ := out.(toolOutput); {
	case eo != nil:
		tc.Status, tc.Error = session.Failed, eo.Message
	case o.Error != "":
		tc.Status, tc.Error = session.Failed, o.Error
	}
	session.Publish(h, in.RunID, session.Event{Type: session.EvToolSettled, Step: in.StepID, ToolCall: &tc})
	return out, eo
}

// runTool runs a tool call as a run of its own, under an id made from
// the step's, so an attempt after a restart finds the run the first
// attempt started rather than starting another.
func (l *Loop) runTool(ctx context.Context, h *host.Host, a *LoopAgent, in abi.StepInput, name string, ti toolInput) (any, *abi.ErrorObject) {
	t, ok := a.tool(name)
	if !ok {
		return toolOutput{Error: fmt.Sprintf("there is no tool called %q", name)}, nil
	}
	args := json.RawMessage(ti.Arguments)
	if strings.TrimSpace(ti.Arguments) == "" {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return toolOutput{Error: "the arguments are not JSON: " + ti.Arguments}, nil
	}
	childID := stepRunID(in.RunID, in.StepID)
	if t.Agent != "" {
		return l.agentTool(ctx, t, in.RunID, delegatedTurnPrefix+childID, args)
	}
	if task, err := isTaskTool(ctx, h, t.Tool); err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	} else if task {
		res, err := l.startTask(ctx, in.RunID, t.Tool, args, childID)
		if err != nil {
			return toolCallError(err)
		}
		return res, nil
	}
	h, ri, err := l.call(ctx, t.Tool, args, childID)
	if err != nil {
		return toolCallError(err)
	}
	if !ri.Status.Terminal() {
		if ri, err = waitRun(ctx, h, childID); err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
		}
	}
	switch ri.Status {
	case store.StatusCompleted:
		out := ri.Result
		if len(out) == 0 {
			out = json.RawMessage(`null`)
		}
		return toolOutput{Output: out}, nil
	case store.StatusCancelled:
		return toolOutput{Error: "the tool call was cancelled"}, nil
	}
	msg := "the tool call failed"
	if ri.Error != nil {
		msg = ri.Error.Message
	}
	return toolOutput{Error: msg}, nil
}

// agentTool sends the model's message to another agent as a turn.
func (l *Loop) agentTool(ctx context.Context, t LoopTool, runID, turnID string, args json.RawMessage) (any, *abi.ErrorObject) {
	var req struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(args, &req); err != nil || req.Message == "" {
		return toolOutput{Error: `the arguments must be {"message": "..."}`}, nil
	}
	b := l.Delegates
	if b == nil {
		return toolOutput{Error: fmt.Sprintf("the agent %s is unavailable", t.Agent)}, nil
	}
	r, err := b.Turn(ctx, host.AgentTurn{RunID: runID, TurnID: turnID, Agent: t.Agent, Message: req.Message})
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	if r.Status != abi.AgentCompleted {
		msg := "the turn did not complete"
		if r.Error != nil {
			msg = r.Error.Message
		}
		return toolOutput{Error: msg}, nil
	}
	out, _ := json.Marshal(r.Reply)
	if len(r.Data) > 0 {
		out = r.Data
	}
	return toolOutput{Output: out}, nil
}
