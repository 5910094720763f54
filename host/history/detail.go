package history

import (
	"encoding/json"

	"github.com/sandflow/sandflow/abi"
)

// Detail is the host's summary kept in the run record. The log is the
// truth; the detail only saves work (what to wait for) and answers lists.
type Detail struct {
	Waiting *WaitSet         `json:"waiting,omitempty"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Error   *abi.ErrorObject `json:"error,omitempty"`
	// Stalled is why the last attempt to continue the run failed while the
	// run stayed intact (a non-deterministic plugin, say).
	Stalled string `json:"stalled,omitempty"`
}

// WaitSet is the unsatisfied await a suspended guest repeats when resumed.
type WaitSet struct {
	Mode    abi.AwaitMode `json:"mode"`
	Futures []uint32      `json:"futures"`
}
