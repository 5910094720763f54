package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// Invariant names a property the harness checks.
type Invariant string

// The invariants, as Finding.Invariant spells them.
const (
	// InvAckedInLog: a write the server acknowledged with a 2xx is in the
	// run's log.
	InvAckedInLog Invariant = "acked-write-in-log"
	// InvEndedOnce: a run's log holds at most one end (completed, failed
	// or cancelled), and a run the harness did not cancel completed.
	InvEndedOnce Invariant = "ended-once"
	// InvResumable: every run ended after the final restart.
	InvResumable Invariant = "resumable"
	// InvEffectsWithinAttempts: a step's side effects are at most the
	// attempts its log records.
	InvEffectsWithinAttempts Invariant = "effects-within-attempts"
	// InvEffectOfCompletedStep: a step recorded as completed ran at least
	// once.
	InvEffectOfCompletedStep Invariant = "effect-of-completed-step"
	// InvTimerOnce: a timer fires at most once.
	InvTimerOnce Invariant = "timer-fired-once"
	// InvStoreVerifies: sandflow doctor finds the store clean.
	InvStoreVerifies Invariant = "store-verifies"
	// InvLogReadable: the run's log can be read back after the final stop.
	InvLogReadable Invariant = "log-readable"
)

// Finding is one violation of an invariant.
type Finding struct {
	Invariant Invariant
	// RunID is the run the finding is about; empty for the store.
	RunID  string
	Detail string
}

func (f Finding) String() string {
	if f.RunID == "" {
		return fmt.Sprintf("%s: %s", f.Invariant, f.Detail)
	}
	return fmt.Sprintf("%s: run %s: %s", f.Invariant, f.RunID, f.Detail)
}

// Report is what one harness run found.
type Report struct {
	Seed int64
	// Runs is how many runs were driven; Kills how many times the server
	// was killed with SIGKILL.
	Runs, Kills int
	// Acked counts the writes acknowledged with a 2xx, by kind; Lost those
	// of them missing from the log.
	Acked, Lost map[WriteKind]int
	// Superseded counts acknowledged answers and agent turns of runs the
	// harness cancelled whose question or turn the cancel settled first:
	// not lost, and not in Lost.
	Superseded int
	// StepAttempts is the step attempts the logs record; Interrupted those
	// of them that were started and never ended; SideEffects the step
	// executions the counter server saw.
	StepAttempts, InterruptedAttempts, SideEffects int
	Findings                                       []Finding
}

func total(m map[WriteKind]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func byKind(m map[WriteKind]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[WriteKind(k)]))
	}
	return strings.Join(parts, ",")
}

// Summary is the report's one-line summary.
func (r *Report) Summary() string {
	return fmt.Sprintf("chaos: seed=%d runs=%d kills=%d acked=%d (%s) lost=%d (%s) superseded=%d step_attempts=%d interrupted_attempts=%d side_effects=%d findings=%d",
		r.Seed, r.Runs, r.Kills, total(r.Acked), byKind(r.Acked), total(r.Lost), byKind(r.Lost), r.Superseded,
		r.StepAttempts, r.InterruptedAttempts, r.SideEffects, len(r.Findings))
}

// Failed lists the invariants with findings, each once, sorted.
func (r *Report) Failed() []Invariant {
	seen := map[Invariant]bool{}
	var out []Invariant
	for _, f := range r.Findings {
		if !seen[f.Invariant] {
			seen[f.Invariant] = true
			out = append(out, f.Invariant)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
