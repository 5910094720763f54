package history

import (
	"fmt"

	"github.com/sandflow/sandflow/store"
)

// Payload is the data of one event as the type of its kind (kinds.go):
// *RunCreated, *StepStarted, and so on.
type Payload interface {
	// EventKind is the kind of the event the payload is the data of.
	EventKind() string
}

// Parse decodes an event's data as the type of its kind, for readers of
// a history who want one type per kind rather than Data. Data that does
// not decode, or a kind this version does not know, is an error wrapping
// ErrBadHistory. Fields the event carries that its kind does not list are
// left out, as a reader of an older version would leave out new ones.
func Parse(e store.Event) (Payload, error) {
	d, err := Decode(e)
	if err != nil {
		return nil, err
	}
	p, ok := d.typed(e.Kind)
	if !ok {
		return nil, fmt.Errorf("%w: event %d is of an unknown kind %q", ErrBadHistory, e.Seq, e.Kind)
	}
	return p, nil
}
