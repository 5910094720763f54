//go:build unix && !chaos

package chaos

import "time"

// harnessConfig is the short version, part of go test ./...: well under a
// minute on two cores once the binary and the tool are built. Settle
// is generous for a loaded machine: the drive ends as soon as every run
// has.
var harnessConfig = Config{Runs: 30, Kills: 20, MinUp: 300 * time.Millisecond, MaxUp: 1500 * time.Millisecond,
	AfterAck: 700 * time.Millisecond, AckShare: 0.75, Settle: time.Minute}
