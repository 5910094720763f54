package codec

import (
	"bytes"
	"testing"
	"time"
)

// A frame decodes to the bytes compressed, after what dst held; a damaged
// frame is refused.
func TestCompressRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte("sandflow "), 500)
	z := Compress([]byte("prefix"), data)
	if !bytes.HasPrefix(z, []byte("prefix")) || len(z) >= len(data) {
		t.Fatalf("Compress = %d bytes, want the prefix and fewer than %d", len(z), len(data))
	}
	out, err := Decompress(z[len("prefix"):])
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("Decompress = %d bytes, %v; want the %d bytes compressed", len(out), err, len(data))
	}
	frame := z[len("prefix"):]
	for name, bad := range map[string][]byte{
		"truncated": frame[:len(frame)/2],
		"bad magic": append([]byte{0, 0, 0, 0}, frame[4:]...),
		"garbage":   []byte("no zstd frame"),
	} {
		if out, err := Decompress(bad); err == nil {
			t.Errorf("Decompress(%s) = %d bytes, want an error", name, len(out))
		}
	}
}

func TestInRange(t *testing.T) {
	for tm, want := range map[time.Time]bool{
		MinTime:         true,
		MaxTime:         true,
		MinTime.Add(-1): false,
		MaxTime.Add(1):  false,
		time.Unix(0, 0): true,
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC): false,
	} {
		if got := InRange(tm); got != want {
			t.Errorf("InRange(%s) = %v, want %v", tm.Format(time.RFC3339Nano), got, want)
		}
	}
}
