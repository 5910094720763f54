package postgres

import (
	"context"
	"errors"
	"testing"
)

func TestOpenRefusesBadConnString(t *testing.T) {
	for _, cs := range []string{"mysql://u@h/db", "postgres://u@h:notaport/db", "host=h port=x"} {
		s, err := Open(context.Background(), cs, nil)
		if !errors.Is(err, ErrBadConnString) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrBadConnString", cs, err)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	// Port 1 on the loopback: nothing listens, the connect is refused at once.
	s, err := Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=5", nil)
	if !errors.Is(err, ErrUnreachable) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open = %v, want ErrUnreachable", err)
	}
	if errors.Is(err, ErrBadConnString) {
		t.Fatalf("Open = %v, also ErrBadConnString", err)
	}
}
