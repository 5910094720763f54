package engine

import "context"

// CPUBudget is the CPU-time budget of a running guest, which the host
// restarts and pauses from inside its host calls: a replay gives each
// recorded activation a fresh budget, and time spent waiting on something
// slow outside the guest (a capability, say) does not count.
type CPUBudget interface {
	// RestartCPU gives the running call a fresh budget, from now.
	RestartCPU()
	// RenewCPU is RestartCPU for the replay of a recorded activation,
	// whose host calls are answered from the log: the budget may start at
	// the next reading of the engine's clock rather than now.
	RenewCPU()
	// PauseCPU stops the budget's clock and returns what starts it again.
	PauseCPU() (resume func())
}

// callerKey is the context key of WithCaller.
type callerKey struct{}

// WithCaller returns ctx carrying c, the instance (or an engine's other
// stand-in) whose host calls ctx is passed to. An engine passes such a
// context to its OpHandler, so that BudgetOf finds the budget there, and
// may find c again with Caller in its own host functions.
func WithCaller(ctx context.Context, c CPUBudget) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// Caller returns what WithCaller put in ctx, or nil. An engine's host
// functions assert it to their instance type.
func Caller(ctx context.Context) any {
	if ctx == nil {
		return nil
	}
	return ctx.Value(callerKey{})
}

// BudgetOf returns the CPU budget of the guest whose host call ctx belongs
// to, or nil.
func BudgetOf(ctx context.Context) CPUBudget {
	c, _ := Caller(ctx).(CPUBudget)
	return c
}
