package host

import (
	"strings"
	"testing"
	"time"
)

// Question IDs made later sort later (their store index grows at its
// end), keep 64 random bits, and differ within a millisecond.
func TestTimedIDs(t *testing.T) {
	a := newTimedID("ask_", 8)
	time.Sleep(2 * time.Millisecond)
	b := newTimedID("ask_", 8)
	if !(a < b) {
		t.Fatalf("%s made before %s sorts after it", a, b)
	}
	if len(a) != len("ask_")+10+13 || strings.Trim(a[len("ask_"):], sortedDigits) != "" {
		t.Fatalf("ID %q: want ask_, 10 time digits and 13 random ones, all of %q", a, sortedDigits)
	}
	seen := map[string]bool{}
	for range 1000 {
		id := newTimedID("ask_", 8)
		if seen[id] {
			t.Fatalf("ID %s made twice", id)
		}
		seen[id] = true
	}
	// The time digits are the milliseconds, most significant first.
	ms := time.Now().UnixMilli()
	id := newTimedID("", 0)
	got := int64(0)
	for _, c := range id {
		got = got<<5 | int64(strings.IndexRune(sortedDigits, c))
	}
	if d := got - ms; d < 0 || d > 1000 {
		t.Fatalf("ID %s holds time %d, made at %d", id, got, ms)
	}
}

// Plain IDs are the prefix and n random bytes in lower-case base32, of
// any length.
func TestNewID(t *testing.T) {
	for _, n := range []int{0, 1, 16, 32, 40} {
		id := newID("whk_", n)
		body, ok := strings.CutPrefix(id, "whk_")
		if !ok || len(body) != idEncoding.EncodedLen(n) || strings.Trim(body, sortedDigits) != "" {
			t.Errorf("newID(whk_, %d) = %q", n, id)
		}
		if raw, err := idEncoding.DecodeString(body); err != nil || len(raw) != n {
			t.Errorf("newID(whk_, %d) = %q: %d bytes, %v", n, id, len(raw), err)
		}
	}
	if a, b := newID("", 16), newID("", 16); a == b {
		t.Errorf("two IDs alike: %s", a)
	}
	// A token's and a question's ID are one allocation each: the string.
	if n := testing.AllocsPerRun(20, func() { newID("whk_", 16) }); n != 1 {
		t.Errorf("newID: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(20, func() { newTimedID("ask_", 8) }); n != 1 {
		t.Errorf("newTimedID: %v allocations, want 1", n)
	}
}
