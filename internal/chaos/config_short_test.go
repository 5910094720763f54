//go:build unix && !chaos

package chaos

import "time"

// harnessConfig is the short version, part of go test ./...: well under a
// minute on two cores once the binary and the tool are built.
var harnessConfig = Config{Runs: 24, Kills: 6, MinUp: 700 * time.Millisecond, MaxUp: 2500 * time.Millisecond,
	AfterAck: 700 * time.Millisecond, Settle: 25 * time.Second}
