package jsprogram_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// bigReply answers "big" with a reply of just under the 4 MiB limit as
// JSON.
const bigReply = 4<<20 - 16

func bigReplies(t host.AgentTurn) abi.AgentResult {
	if t.Message == "big" {
		return abi.AgentResult{Status: abi.AgentCompleted, Reply: strings.Repeat("r", bigReply)}
	}
	return echo(t)
}

// A batch whose replies together exceed one frame of the worker protocol
// (64 MiB) reaches the program in parts. Regression: 17 replies of 4 MB
// made an await answer the parent could not send, and the legal program
// failed as worker_crashed.
func TestFanOutPastOneFrame(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, newAgents(bigReplies))
	ri := f.run(`const ps = []; for (let i = 0; i < 17; i++) ps.push(ctx.agent("echo", { message: "big" }));
const rs = await Promise.all(ps); return rs.reduce((n, r) => n + r.length, 0);`)
	if got := result[int](t, ri); got != 17*bigReply {
		t.Fatalf("the program saw %d bytes of replies, want %d", got, 17*bigReply)
	}
}

// What one start or resume carries between the program and the host is
// bounded: past Limits.InFlightBytes the run fails with in_flight_limit,
// before the batch reaches the worker.
func TestInFlightLimit(t *testing.T) {
	lim := jsprogram.Limits{JSTime: 10 * time.Second, TotalTime: time.Minute, InFlightBytes: 10 << 20}
	f := newFixture(t, lim, newAgents(bigReplies))
	fanOut := func(n int) string {
		return `const ps = []; for (let i = 0; i < ` + strconv.Itoa(n) + `; i++) ps.push(ctx.agent("echo", { message: "big" }));
const rs = await Promise.all(ps); return rs.length;`
	}
	if got := result[int](t, f.run(fanOut(2))); got != 2 {
		t.Fatalf("2 replies of 4 MiB: result %d", got)
	}
	e := failure(t, f.run(fanOut(3)))
	if e.Code != jsprogram.CodeInFlight {
		t.Fatalf("3 replies of 4 MiB under a 10 MiB cap: code %s, want %s: %v", e.Code, jsprogram.CodeInFlight, e)
	}
	// The cap counts the whole run, which each resume replays: three
	// replies awaited one by one are as many as three at once.
	e = failure(t, f.run(`let n = 0; for (let i = 0; i < 3; i++) n += (await ctx.agent("echo", { message: "big" })).length; return n;`))
	if e.Code != jsprogram.CodeInFlight {
		t.Fatalf("3 replies of 4 MiB one by one: code %s, want %s: %v", e.Code, jsprogram.CodeInFlight, e)
	}
}
