package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/mcp"
)

// direct calls a tool over the HTTP API, as a client without MCP would.
type direct struct {
	b   *testing.B
	url string
}

func newDirect(b *testing.B, e *env) *direct {
	api, err := httpapi.New(e.H, httpapi.Config{APITokens: []string{token}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(api)
	b.Cleanup(func() {
		hs.Close()
		api.Close(context.Background())
	})
	return &direct{b: b, url: hs.URL}
}

func (d *direct) call(tool string, input any) json.RawMessage {
	body, _ := json.Marshal(input)
	req, _ := http.NewRequest("POST", d.url+"/v1/tools/"+tool+"/calls?wait=60s", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Run struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"run"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Run.Status != "completed" {
		d.b.Fatalf("direct %s: %d %v %+v", tool, resp.StatusCode, err, out)
	}
	return out.Run.Result
}

// pair times one direct call and one MCP call of the same work per
// iteration, interleaved so that both see the same machine, and reports
// each, the MCP call's overhead and the ratio; ns/op is the pair.
func pair(b *testing.B, directCall, mcpCall func()) {
	directCall() // warm both paths: the tool's first run compiles it
	mcpCall()
	var dSum, mSum time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first, so that neither always pays for
		// what the other left behind (garbage, a worker to wake).
		if i%2 == 0 {
			t0 := time.Now()
			directCall()
			t1 := time.Now()
			mcpCall()
			dSum += t1.Sub(t0)
			mSum += time.Since(t1)
		} else {
			t0 := time.Now()
			mcpCall()
			t1 := time.Now()
			directCall()
			mSum += t1.Sub(t0)
			dSum += time.Since(t1)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(dSum.Microseconds())/n, "direct-µs/call")
	b.ReportMetric(float64(mSum.Microseconds())/n, "mcp-µs/call")
	b.ReportMetric(float64((mSum-dSum).Microseconds())/n, "overhead-µs/call")
	b.ReportMetric(float64(mSum)/float64(dSum), "mcp/direct")
}

// BenchmarkEchoCallMCPVsHTTPAPI: one call of a trivial JavaScript tool
// (echo) over streamable HTTP with the SDK's client, against the same
// call over the HTTP API (POST /v1/tools/echo/calls); each era.
func BenchmarkEchoCallMCPVsHTTPAPI(b *testing.B) {
	for _, era := range eras {
		b.Run(era, func(b *testing.B) {
			e := newEnv(b, nil)
			d := newDirect(b, e)
			cs, err := e.connectWith(era, nil, false, token)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			in := map[string]any{"msg": "hi"}
			pair(b, func() { d.call("echo", in) }, func() {
				r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "echo", Arguments: in})
				if err != nil || r.IsError {
					b.Fatalf("%v %+v", err, r)
				}
			})
		})
	}
}

// BenchmarkFanOut100MCPVsHTTPAPI: the workflow tool running a program
// that fans out to 100 agent calls and returns their replies, as an MCP
// task (2026-07-28: tools/call, then a subscriptions/listen for the task,
// read until it ends; 2025-11-25: tools/call, then tasks/result) against
// the same call over the HTTP API.
func BenchmarkFanOut100MCPVsHTTPAPI(b *testing.B) {
	js := `const rs = await Promise.all(Array.from({length: 100}, (_, i) => ctx.agent("triage", {message: "#" + i}))); return rs.length;`
	in := map[string]any{"js": js}
	for _, era := range eras {
		b.Run(era, func(b *testing.B) {
			e := newEnv(b, nil)
			d := newDirect(b, e)
			cs, err := e.connectWith(era, nil, era == mcp.Version20260728, token)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			calls := 0
			pair(b, func() {
				if got := string(d.call("workflow", in)); got != "100" {
					b.Fatalf("direct: %s", got)
				}
			}, func() {
				// A session of its own for each call: a session's record
				// grows with its tasks, and so does the cost of a call in it.
				calls++
				p := &sdk.CallToolParams{Name: "workflow", Arguments: in, Meta: sdk.Meta{mcp.SessionMeta: fmt.Sprintf("bench-%d", calls)}}
				r, err := cs.CallTool(context.Background(), p)
				if err != nil {
					b.Fatal(err)
				}
				id := benchTaskID(r)
				var res *taskRes
				if era == mcp.Version20260728 {
					// Pushed: a listen for the task, read to its end.
					_, msgs := listen(b, e, true, id)
					res = &taskRes{}
					for m := range msgs {
						var n pushed
						if json.Unmarshal(m, &n) == nil && n.Method == "notifications/tasks" && n.Params.Result != nil {
							res.StructuredContent = n.Params.Result.StructuredContent
						}
					}
				} else {
					res, err = sdk.CallCustomMethod[*taskReq, *taskRes](context.Background(), cs, "tasks/result", &taskReq{TaskID: id})
				}
				if err != nil || strings.TrimSpace(string(res.StructuredContent)) != "100" {
					b.Fatalf("mcp: %v %+v", err, res)
				}
			})
		})
	}
}

func benchTaskID(r *sdk.CallToolResult) string {
	if rt, ok := r.Meta["io.modelcontextprotocol/related-task"].(map[string]any); ok {
		return fmt.Sprint(rt["taskId"])
	}
	m, _ := r.StructuredContent.(map[string]any)
	return fmt.Sprint(m["taskId"])
}
