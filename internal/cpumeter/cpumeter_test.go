package cpumeter

import (
	"context"
	"testing"
	"time"
)

// A start counts from itself; a renewal counts from the meter's next
// reading, which a pause also is.
func TestCPUMeterRenew(t *testing.T) {
	const budget = 40 * time.Millisecond
	var m Meter
	m.Start(context.Background(), budget)
	time.Sleep(budget + 20*time.Millisecond)
	if !m.Spent() {
		t.Fatal("a start's budget did not count the time since the start")
	}

	m.Renew()
	time.Sleep(budget + 20*time.Millisecond)
	if m.Spent() {
		t.Fatal("a renewed budget counted the time before its first reading")
	}
	time.Sleep(budget + 20*time.Millisecond)
	if !m.Spent() {
		t.Fatal("a renewed budget was not spent a budget after its first reading")
	}

	m.Renew()
	resume := m.Pause() // the first reading: the budget runs from here
	time.Sleep(budget + 20*time.Millisecond)
	resume()
	if m.Spent() {
		t.Fatal("time paused counted against a renewed budget")
	}
	time.Sleep(budget + 20*time.Millisecond)
	if !m.Spent() {
		t.Fatal("a renewed, paused and resumed budget was never spent")
	}
}
