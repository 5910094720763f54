package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// plan is what one run does: when it starts, the tool it calls, its
// input, and whether the harness cancels it at its first wait.
type plan struct {
	ID     string
	After  time.Duration
	Tool   string
	Input  map[string]any
	Cancel bool
	// jitter seeds the pauses between the driver's looks at the run.
	jitter uint64
}

// workflowProgram is the workflow tool's program: a scripted agent that
// takes a moment, fanned out with a turn of the external agent the
// harness answers, then a second scripted turn.
const workflowProgram = `const [a, b] = await Promise.all([
  ctx.agent("slow", {message: "one"}),
  ctx.agent("ext", {message: "two"}),
]);
const c = await ctx.agent("slow", {message: "three"});
return {a, b, c};`

// agentsFile is the server's agents: slow is scripted, ext is external
// (its turns are work items the harness completes).
const agentsFile = `{"agents": [
  {"name": "slow", "description": "a scripted agent that takes a moment", "reply": "slow: {message}", "delayMs": 300},
  {"name": "ext", "kind": "external", "description": "an agent the crash harness answers"}
]}`

// plans picks n runs' plans from the seed, to start within spread. A plan
// depends only on the seed and its index.
func plans(seed int64, n int, counterURL string, spread time.Duration) []plan {
	out := make([]plan, n)
	for i := range out {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)+1))
		p := plan{ID: fmt.Sprintf("chaos-%03d", i), Cancel: rng.IntN(10) == 0, After: time.Duration(rng.Int64N(int64(spread) + 1)),
			jitter: rng.Uint64()}
		if rng.IntN(4) == 0 {
			p.Tool, p.Input = "workflow", map[string]any{"js": workflowProgram}
		} else {
			in := map[string]any{"counter": counterURL, "stepDelayMs": []int{0, 100, 400}[rng.IntN(3)]}
			if rng.IntN(3) != 0 {
				in["ask"] = true
			}
			if rng.IntN(2) == 0 {
				in["sleepMs"] = 200 + rng.IntN(1300)
			}
			if rng.IntN(2) == 0 {
				in["hook"] = "hook-" + p.ID
			}
			if rng.IntN(3) == 0 {
				in["webhook"] = true
			}
			if rng.IntN(3) == 0 {
				in["agent"] = "ext"
			}
			p.Tool, p.Input = "chaos", in
		}
		out[i] = p
	}
	return out
}

// wait is one entry of a RunInfo's waiting list.
type wait struct {
	Kind  string `json:"kind"`
	AskID string `json:"askId"`
	Token string `json:"token"`
	URL   string `json:"url"`
	Agent string `json:"agent"`
}

type runInfo struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Waiting []wait `json:"waiting"`
}

func (ri runInfo) ended() bool {
	return ri.Status == "completed" || ri.Status == "failed" || ri.Status == "cancelled"
}

// driver holds what the drive goroutines share.
type driver struct {
	api *api
	srv *server
	// trigger, when set, is a kill to make after the next acknowledged
	// write the server may finish in the background after it answers (an
	// answer, a hook resume, a webhook request): the moments a kill is
	// aimed at. The goroutine that got the ack kills, so that nothing
	// stands between the ack and the kill.
	trigger atomic.Pointer[killTrigger]

	mu         sync.Mutex // guards acks, cancelSent, nonces and errs
	acks       []Ack
	cancelSent map[string]bool
	nonces     int
	errs       []error
}

func (d *driver) nonce(run string, kind WriteKind) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nonces++
	return fmt.Sprintf("nonce-%s-%s-%d", run, kind, d.nonces)
}

func (d *driver) ack(a Ack) {
	a.At = time.Now()
	d.mu.Lock()
	d.acks = append(d.acks, a)
	d.mu.Unlock()
	if a.Kind == WriteAnswer || a.Kind == WriteHook || a.Kind == WriteWebhook {
		if t := d.trigger.Swap(nil); t != nil {
			if t.delay > 0 {
				time.Sleep(t.delay)
			}
			t.err = d.srv.signalKill()
			t.what = fmt.Sprintf("%s after the ack of %s %s", t.delay, a.Kind, a.Key)
			close(t.fired)
		}
	}
}

// killTrigger is a kill armed to follow an ack.
type killTrigger struct {
	delay time.Duration
	fired chan struct{} // closed once the kill is sent; then err and what are set
	err   error
	what  string
}

// unexpected records an answer the harness cannot account for: a harness
// error, not a finding.
func (d *driver) unexpected(err error) {
	d.mu.Lock()
	d.errs = append(d.errs, err)
	d.mu.Unlock()
}

// pause sleeps up to d or until ctx ends, and reports whether ctx is live.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// acted remembers a write the driver sent to a wait, so that it is sent
// again only if it did not take: the wait is still there after a restart,
// or a while later.
type acted struct {
	gen int
	at  time.Time
}

// drive takes one run from its call to its end, or until ctx ends.
func (d *driver) drive(ctx context.Context, p plan) {
	rng := rand.New(rand.NewPCG(p.jitter, 0x6a6974746572))
	jitter := func() time.Duration { return time.Duration(40+rng.IntN(120)) * time.Millisecond }
	if !pause(ctx, p.After) {
		return
	}
	for {
		gen := d.srv.generation()
		st, err := d.api.do(ctx, "POST", "/v1/tools/"+p.Tool+"/calls?wait=0&runId="+p.ID, p.Input, nil)
		if err == nil && st/100 == 2 {
			d.ack(Ack{Kind: WriteCall, RunID: p.ID, Key: p.ID, Status: st, Generation: gen})
			break
		}
		if err == nil && st == http.StatusConflict {
			break // an earlier call, whose answer was lost, made the run
		}
		if err == nil {
			d.unexpected(fmt.Errorf("run %s: calling %s answered %d", p.ID, p.Tool, st))
			return
		}
		if !errors.Is(err, errNoAnswer) || !pause(ctx, jitter()) {
			return
		}
	}
	done := map[string]acted{}
	for pause(ctx, jitter()) {
		gen := d.srv.generation()
		var body struct {
			Run runInfo `json:"run"`
		}
		st, err := d.api.do(ctx, "GET", "/v1/runs/"+p.ID, nil, &body)
		if err != nil || st != http.StatusOK {
			continue // down, or a run whose call was lost: the checks judge it
		}
		ri := body.Run
		if ri.ended() {
			return
		}
		if p.Cancel && ri.Status == "waiting" {
			d.cancel(ctx, p.ID, gen, done)
			continue
		}
		for _, w := range ri.Waiting {
			key := w.Kind + " " + w.AskID + w.Token + w.URL
			if a, ok := done[key]; ok && a.gen == gen && time.Since(a.at) < 3*time.Second {
				continue
			}
			if d.resolve(ctx, p.ID, w, gen) {
				done[key] = acted{gen, time.Now()}
			}
		}
	}
}

func (d *driver) cancel(ctx context.Context, run string, gen int, done map[string]acted) {
	if a, ok := done["cancel"]; ok && a.gen == gen && time.Since(a.at) < 3*time.Second {
		return
	}
	d.mu.Lock()
	d.cancelSent[run] = true
	d.mu.Unlock()
	st, err := d.api.do(ctx, "POST", "/v1/runs/"+run+"/cancel", map[string]string{"reason": "chaos"}, nil)
	switch {
	case err != nil:
	case st/100 == 2:
		d.ack(Ack{Kind: WriteCancel, RunID: run, Key: run, Status: st, Generation: gen})
		done["cancel"] = acted{gen, time.Now()}
	case st == http.StatusConflict:
		done["cancel"] = acted{gen, time.Now()} // it ended meanwhile
	default:
		d.unexpected(fmt.Errorf("run %s: cancel answered %d", run, st))
	}
}

// resolve sends the write that settles w, and reports whether the server
// answered it (acknowledged or refused as settled).
func (d *driver) resolve(ctx context.Context, run string, w wait, gen int) bool {
	var kind WriteKind
	var method, u, token, key string
	switch w.Kind {
	case "ask":
		kind, method, u, token, key = WriteAnswer, "POST", d.api.base+"/v1/asks/"+url.PathEscape(w.AskID)+"/answer?wait=0", d.api.token, w.AskID
	case "hook":
		kind, method, u, token, key = WriteHook, "POST", d.api.base+"/v1/hooks/"+url.PathEscape(w.Token)+"?wait=0", d.api.token, w.Token
	case "webhook":
		kind, method, u, key = WriteWebhook, "POST", w.URL, w.URL
	default:
		return false // a step, sleep or retry goes on by itself; agent turns have their worker
	}
	n := d.nonce(run, kind)
	var body any = map[string]string{"nonce": n}
	if kind == WriteAnswer {
		body = map[string]string{"text": n}
	}
	st, err := d.api.doURL(ctx, method, u, token, body, nil)
	switch {
	case err != nil:
		return false
	case st/100 == 2:
		d.ack(Ack{Kind: kind, RunID: run, Key: key, Nonce: n, Status: st, Generation: gen})
		return true
	case st == http.StatusConflict || st == http.StatusNotFound:
		return true // settled already, or gone with its run: the next look tells
	default:
		d.unexpected(fmt.Errorf("run %s: %s %s answered %d", run, kind, key, st))
		return false
	}
}

type workItem struct {
	ID    string `json:"id"`
	RunID string `json:"runId"`
	Agent string `json:"agent"`
}

// agentWorker completes the external agent's turns until ctx ends.
func (d *driver) agentWorker(ctx context.Context) {
	for ctx.Err() == nil {
		gen := d.srv.generation()
		var list struct {
			Turns []workItem `json:"turns"`
		}
		st, err := d.api.do(ctx, "GET", "/v1/agent-turns?unclaimed=true&wait=1s", nil, &list)
		if err != nil || st != http.StatusOK {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		for _, it := range list.Turns {
			p := "/v1/agent-turns/" + url.PathEscape(it.ID)
			if st, err := d.api.do(ctx, "POST", p+"/claim", map[string]any{"worker": "chaos", "leaseSeconds": 30}, nil); err != nil || st != http.StatusOK {
				continue
			}
			n := d.nonce(it.RunID, WriteAgentTurn)
			st, err := d.api.do(ctx, "POST", p+"/complete", map[string]string{"worker": "chaos", "reply": n}, nil)
			if err == nil && st/100 == 2 {
				d.ack(Ack{Kind: WriteAgentTurn, RunID: it.RunID, Key: it.ID, Nonce: n, Status: st, Generation: gen})
			}
		}
	}
}

// decodeRunShow reads sandflow runs show --json.
func decodeRunShow(b []byte) (status string, events []Event, err error) {
	var v struct {
		Run    runInfo `json:"run"`
		Events []Event `json:"events"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", nil, err
	}
	return v.Run.Status, v.Events, nil
}
