package agents

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ScriptedModel is a chat-completions endpoint (an http.Handler for
// POST .../chat/completions) whose replies are scripted, for demos and
// tests of loop agents that must run offline. Its reply to a
// conversation is Steps[n], n the number of tool results in it (the last
// step when n is past the end); {result} in a step's Text is replaced by
// the last tool result.
type ScriptedModel struct {
	Steps []ScriptedModelStep
}

// ScriptedModelStep is one reply of a ScriptedModel: tool calls, or a
// text.
type ScriptedModelStep struct {
	Text      string
	ToolCalls []ScriptedToolCall
}

// ScriptedToolCall is a tool call a ScriptedModel makes.
type ScriptedToolCall struct {
	Name      string
	Arguments string
}

// maxScriptedRequest bounds a request a ScriptedModel reads.
const maxScriptedRequest = 16 << 20

func (m *ScriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") || len(m.Steps) == 0 {
		http.Error(w, `{"error": {"message": "not found", "type": "invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Stream   bool `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScriptedRequest)).Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf(`{"error": {"message": %q, "type": "invalid_request_error"}}`, err.Error()), http.StatusBadRequest)
		return
	}
	n, last := 0, ""
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			n++
			last, _ = msg.Content.(string)
		}
	}
	step := m.Steps[min(n, len(m.Steps)-1)]
	msg := map[string]any{"role": "assistant", "content": strings.ReplaceAll(step.Text, "{result}", last)}
	finish := "stop"
	if len(step.ToolCalls) > 0 {
		var calls []any
		for i, c := range step.ToolCalls {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"], finish = calls, "tool_calls"
	}
	if req.Stream {
		streamScripted(w, n, msg, finish)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("chatcmpl-scripted-%d", n), "object": "chat.completion", "model": "scripted",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
}

// streamScripted writes a reply as chat.completion.chunk events: the
// text a word at a time, the tool calls whole, the finish reason, then
// the usage and [DONE].
func streamScripted(w http.ResponseWriter, n int, msg map[string]any, finish string) {
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(choices []any, extra map[string]any) {
		ev := map[string]any{"id": fmt.Sprintf("chatcmpl-scripted-%d", n), "object": "chat.completion.chunk", "model": "scripted", "choices": choices}
		for k, v := range extra {
			ev[k] = v
		}
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	delta := func(d map[string]any, finish any) {
		send([]any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}, nil)
	}
	delta(map[string]any{"role": "assistant", "content": ""}, nil)
	if text, _ := msg["content"].(string); text != "" {
		for _, word := range strings.SplitAfter(text, " ") {
			delta(map[string]any{"content": word}, nil)
		}
	}
	if calls, _ := msg["tool_calls"].([]any); len(calls) > 0 {
		for i, c := range calls {
			c.(map[string]any)["index"] = i
		}
		delta(map[string]any{"tool_calls": calls}, nil)
	}
	delta(map[string]any{}, finish)
	send([]any{}, map[string]any{"usage": map[string]any{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
