package state

import (
	"fmt"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// StepID is the id of the step at position op of a run: what a step's
// handler sees as its step id, stable across retries and replays.
func StepID(runID string, op uint32) string { return fmt.Sprintf("%s:%d", runID, op) }

// Default step retry policy (abi/README.md).
var DefaultRetry = abi.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 1000, MaxBackoffMs: 60000, BackoffFactor: 2}

// RetryAt decides whether a failed attempt is retried, and when.
func RetryAt(pol *abi.RetryPolicy, attempt int, e *abi.ErrorObject, now time.Time) (time.Time, bool) {
	p := DefaultRetry
	if pol != nil {
		if pol.MaxAttempts > 0 {
			p.MaxAttempts = pol.MaxAttempts
		}
		if pol.InitialBackoffMs > 0 {
			p.InitialBackoffMs = pol.InitialBackoffMs
		}
		if pol.MaxBackoffMs > 0 {
			p.MaxBackoffMs = pol.MaxBackoffMs
		}
		if pol.BackoffFactor > 0 {
			p.BackoffFactor = pol.BackoffFactor
		}
	}
	if e.Type == abi.ErrTypeFatal || e.Type == abi.ErrTypeTooLarge || attempt >= p.MaxAttempts {
		return time.Time{}, false
	}
	if e.Type == abi.ErrTypeRetryable && e.RetryAfterMs > 0 {
		// Bounded like a sleep, so the retry time can be stored.
		return now.Add(time.Duration(min(e.RetryAfterMs, MaxSleepMs)) * time.Millisecond), true
	}
	d := float64(p.InitialBackoffMs) * math.Pow(p.BackoffFactor, float64(attempt-1))
	d = math.Min(d, math.Min(float64(p.MaxBackoffMs), MaxSleepMs))
	// Equal jitter: half the delay is fixed, half random, so retries of many
	// runs that failed together spread out.
	d = d/2 + mrand.Float64()*d/2
	return now.Add(time.Duration(d * float64(time.Millisecond))), true
}

// MaxSleepMs bounds a sleep, and a retry's delay, at about 100 years: the
// store keeps times up to 2262.
const MaxSleepMs = 100 * 365 * 24 * 3600 * 1000
