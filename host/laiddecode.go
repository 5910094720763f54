package host

import "math"

// decodeLaid decodes the data of the events a long log is mostly made of
// (run_resumed, step_started, step_completed) as the host's own encoder
// lays them out (encodeHot: compact, in evData's field order), matching
// each key where it must be rather than reading keys and looking them up:
// reading keys was most of decodeHot's time. Values are read by
// decodeHotFields' own functions, so whatever it takes it decodes to the
// same evData (TestDecodeLaid). It reports false for anything else, with
// the hot fields cleared, and decodeHot then reads the data as usual.
func decodeLaid(kind string, b []byte, d *evData, strs map[string]string) bool {
	var ok bool
	switch kind {
	case EvRunResumed:
		ok = laidResumed(b, d)
	case EvStepStarted:
		ok = laidStepStarted(b, d, strs)
	case EvStepCompleted:
		ok = laidStepCompleted(b, d)
	default:
		return false
	}
	if !ok {
		d.clearHot()
	}
	return ok
}

// hasAt reports whether b holds s at i.
func hasAt(b []byte, i int, s string) bool {
	return i >= 0 && len(b)-i >= len(s) && string(b[i:i+len(s)]) == s
}

// endsAt reports whether the object ends at b[i], the last byte.
func endsAt(b []byte, i int) bool { return i == len(b)-1 && b[i] == '}' }

// {} or {"activation":N}
func laidResumed(b []byte, d *evData) bool {
	if len(b) == 2 {
		return b[0] == '{' && b[1] == '}'
	}
	if !hasAt(b, 0, `{"activation":`) {
		return false
	}
	n, i, ok := plainUint(b, len(`{"activation":`), math.MaxInt32)
	d.Activation = int(n)
	return ok && endsAt(b, i)
}

// {"input":V,"op":N,"name":"S","attempt":N}, input left out when empty
func laidStepStarted(b []byte, d *evData, strs map[string]string) bool {
	if len(b) < 2 || b[0] != '{' {
		return false
	}
	i := 1
	if hasAt(b, i, `"input":`) {
		i += len(`"input":`)
		j, ok := skipValue(b, i, 0)
		if !ok || !hasAt(b, j, ",") {
			return false
		}
		d.Input, i = b[i:j:j], j+1
	}
	if !hasAt(b, i, `"op":`) {
		return false
	}
	n, i, ok := plainUint(b, i+len(`"op":`), math.MaxUint32)
	if !ok || !hasAt(b, i, `,"name":`) {
		return false
	}
	d.Op = uint32(n)
	v, i, ok := plainBytes(b, i+len(`,"name":`))
	if !ok || !hasAt(b, i, `,"attempt":`) {
		return false
	}
	d.Name = intern(strs, v)
	n, i, ok = plainUint(b, i+len(`,"attempt":`), math.MaxInt32)
	d.Attempt = int(n)
	return ok && endsAt(b, i)
}

// {"op":N,"attempt":N,"result":V}, result left out when empty
func laidStepCompleted(b []byte, d *evData) bool {
	if !hasAt(b, 0, `{"op":`) {
		return false
	}
	n, i, ok := plainUint(b, len(`{"op":`), math.MaxUint32)
	if !ok || !hasAt(b, i, `,"attempt":`) {
		return false
	}
	d.Op = uint32(n)
	n, i, ok = plainUint(b, i+len(`,"attempt":`), math.MaxInt32)
	if !ok {
		return false
	}
	d.Attempt = int(n)
	if hasAt(b, i, `,"result":`) {
		i += len(`,"result":`)
		j, ok := skipValue(b, i, 0)
		if !ok {
			return false
		}
		d.Result, i = b[i:j:j], j
	}
	return endsAt(b, i)
}
