package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
)

// ErrDiffers: the worker answered a replayed op otherwise than the
// host's handler.
var ErrDiffers = errors.New("jsprogram: the worker's replay answered an op otherwise than the host")

// Check passes the ops a worker answered from the log ('Y', b) to the
// host's handler, in order, and checks its answers, and its clock after
// each, against the worker's. fresh is set when the handler restarts the
// budget; count is called with each op's share of the activation's
// in-flight bytes, as a round trip would have carried it, once the op
// checked, and may stop the check with its error.
func Check(ctx context.Context, b []byte, ops engine.OpHandler, clock engine.GuestClock, fresh *bool, count func(int64) error) error {
	r := &reader{b: b}
	for n := 1; len(r.b) > 0; n++ {
		kind, name, issued, payload := abi.OpKind(r.u32()), r.bytes(), r.u32(), r.bytes()
		size, sum, at, restarted := r.u32(), r.u32(), int64(r.u64()), r.u8() == 1
		if r.bad {
			return fmt.Errorf("jsprogram: a malformed list of replayed ops: %w", ErrDiffers)
		}
		body, err := ops.Op(ctx, kind, name, payload)
		if err != nil {
			return err
		}
		if uint32(len(body)) != size || crc32.Checksum(body, castagnoli) != sum || clock.Now() != at || *fresh != restarted {
			return fmt.Errorf("%w (op %d of the list, %s)", ErrDiffers, n, kind)
		}
		*fresh = false
		if err := count(int64(8 + len(name) + int(issued) + len(body))); err != nil {
			return err
		}
	}
	return nil
}
