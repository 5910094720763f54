package plugins

import "time"

// Limits bound what a run may use. Zero fields take the defaults. A host
// has its limits; a plugin's manifest may tighten them for its runs
// (ManifestLimits), never loosen them.
type Limits struct {
	// MemoryBytes bounds an instance's linear memory.
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// CPUTime bounds each activation and each step attempt.
	CPUTime time.Duration `json:"cpuTime,omitempty"`
	// PayloadBytes bounds each op payload and each recorded value.
	PayloadBytes int `json:"payloadBytes,omitempty"`
	// Events bounds a run's log.
	Events int `json:"events,omitempty"`
	// OutputBytes bounds the stdout and stderr recorded per run.
	OutputBytes int64 `json:"outputBytes,omitempty"`
}

// DefaultLimits are the limits of abi/README.md.
var DefaultLimits = Limits{
	MemoryBytes:  256 << 20,
	CPUTime:      10 * time.Second,
	PayloadBytes: 1 << 20,
	Events:       100_000,
	OutputBytes:  64 << 10,
}

// WithDefaults returns l with each zero field taken from d.
func (l Limits) WithDefaults(d Limits) Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.CPUTime == 0 {
		l.CPUTime = d.CPUTime
	}
	if l.PayloadBytes == 0 {
		l.PayloadBytes = d.PayloadBytes
	}
	if l.Events == 0 {
		l.Events = d.Events
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = d.OutputBytes
	}
	return l
}
