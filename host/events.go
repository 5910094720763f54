package host

import "github.com/sandflow/sandflow/host/history"

// Event kinds of a run's log, as package history names them. The names
// are part of the history format.
const (
	EvRunCreated       = history.KindRunCreated
	EvRunResumed       = history.KindRunResumed
	EvStepStarted      = history.KindStepStarted
	EvStepCompleted    = history.KindStepCompleted
	EvStepFailed       = history.KindStepFailed
	EvTimerSet         = history.KindTimerSet
	EvTimerFired       = history.KindTimerFired
	EvAskOpened        = history.KindAskOpened
	EvAskSettled       = history.KindAskSettled
	EvHookCreated      = history.KindHookCreated
	EvHookNext         = history.KindHookNext
	EvHookReceived     = history.KindHookReceived
	EvHookDisposed     = history.KindHookDisposed
	EvProgress         = history.KindProgress
	EvOutput           = history.KindOutput
	EvRunCompleted     = history.KindRunCompleted
	EvRunFailed        = history.KindRunFailed
	EvRunCancelled     = history.KindRunCancelled
	EvRunUpgraded      = history.KindRunUpgraded
	EvOpRefused        = history.KindOpRefused
	EvWebhookResponded = history.KindWebhookResponded
	EvAgentSent        = history.KindAgentSent
	EvAgentSettled     = history.KindAgentSettled
	EvCallReceived     = history.KindCallReceived
	EvReceive          = history.KindReceive
	EvReplied          = history.KindReplied
	EvAbortRequested   = history.KindAbortRequested
	EvSignal           = history.KindSignal
)
