package sandflow

import (
	"encoding/json"
	"testing"
)

// The SDK's own decoding of integers agrees with encoding/json on every
// input: what it accepts decodes to the same value, and what it does not
// is left to json.Unmarshal.
func TestDecodeIntLikeJSON(t *testing.T) {
	inputs := []string{
		"0", "-0", "5", "-17", "42", "007", "+5", "1e3", "1.0", "", "-", "--1", "0x10", "1_000",
		"123456789012345678", "-123456789012345678", "1234567890123456789",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		" 5", "5 ", "null", `"5"`, "true",
	}
	for _, in := range inputs {
		var fast, slow int
		errFast := decodeValue([]byte(in), &fast)
		errSlow := json.Unmarshal([]byte(in), &slow)
		if (errFast == nil) != (errSlow == nil) || fast != slow {
			t.Errorf("%q: SDK %d, %v; encoding/json %d, %v", in, fast, errFast, slow, errSlow)
		}
		var fast64, slow64 int64
		errFast = decodeValue([]byte(in), &fast64)
		errSlow = json.Unmarshal([]byte(in), &slow64)
		if (errFast == nil) != (errSlow == nil) || fast64 != slow64 {
			t.Errorf("%q as int64: SDK %d, %v; encoding/json %d, %v", in, fast64, errFast, slow64, errSlow)
		}
	}
}
