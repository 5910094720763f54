//go:build unix && chaos

package chaos

import "time"

// harnessConfig is the long version: go test -tags chaos ./internal/chaos.
var harnessConfig = Config{Runs: 60, Kills: 40, MinUp: 500 * time.Millisecond, MaxUp: 4 * time.Second,
	AfterAck: time.Second, Settle: 90 * time.Second}
