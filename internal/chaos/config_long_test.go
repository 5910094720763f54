//go:build unix && chaos

package chaos

import "time"

// harnessConfig is the long version: go test -tags chaos ./internal/chaos.
var harnessConfig = Config{Runs: 80, Kills: 60, MinUp: 300 * time.Millisecond, MaxUp: 4 * time.Second,
	AfterAck: time.Second, AckShare: 0.6, Settle: 90 * time.Second}
