package host

import (
	"strconv"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// encodeHot encodes the event data of the kinds most events are (a run
// created or resumed, a step started or completed, a question opened or
// settled) as json.Marshal does, byte for byte, without its reflection:
// every event is encoded once, when it is recorded. It reports false for
// anything else (a field it does not write, a string json.Marshal would
// escape, raw JSON it would change), which the caller encodes with
// json.Marshal.
// TestEncodeHotLikeJSON compares the two for every field of evData.
func encodeHot(d *evData) ([]byte, bool) {
	if !d.onlyHot() {
		return nil, false
	}
	b := make([]byte, 0, 96+len(d.Input)+len(d.Request)+len(d.Result)+len(d.Seed)+len(d.ModuleHash))
	b = append(b, '{')
	key := func(k string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), k...), '"', ':')
	}
	str := func(k, v string) bool {
		if v == "" {
			return true
		}
		if !jsonwire.PlainString(v) {
			return false
		}
		key(k)
		b = append(append(append(b, '"'), v...), '"')
		return true
	}
	raw := func(k string, v []byte) bool {
		if len(v) == 0 {
			return true
		}
		if !jsonwire.PlainRaw(v) {
			return false
		}
		key(k)
		b = append(b, v...)
		return true
	}
	num := func(k string, n int64) {
		if n != 0 {
			key(k)
			b = strconv.AppendInt(b, n, 10)
		}
	}
	flag := func(k string, v bool) {
		if v {
			key(k)
			b = append(b, "true"...)
		}
	}
	// In evData's field order.
	if !str("tool", d.Tool) || !str("plugin", d.Plugin) {
		return nil, false
	}
	num("version", int64(d.Version))
	if !str("moduleHash", d.ModuleHash) || !raw("input", d.Input) || !str("seed", d.Seed) {
		return nil, false
	}
	flag("noAsk", d.NoAsk)
	flag("serve", d.Serve)
	flag("sharedInit", d.SharedInit)
	if len(d.Agents) > 0 {
		key("agents")
		b = append(b, '[')
		for i, a := range d.Agents {
			if !jsonwire.PlainString(a.Name) || !jsonwire.PlainString(a.Description) {
				return nil, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, `{"name":"`...), a.Name...), `","description":"`...)
			b = append(append(b, a.Description...), `"}`...)
		}
		b = append(b, ']')
	}
	if !str("url", d.URL) || !str("baseUrl", d.BaseURL) {
		return nil, false
	}
	num("activation", int64(d.Activation))
	num("op", int64(d.Op))
	if !str("kind", d.Kind) || !str("name", d.Name) {
		return nil, false
	}
	num("attempt", int64(d.Attempt))
	if !str("askId", d.AskID) || !raw("request", d.Request) {
		return nil, false
	}
	if a := d.Answer; a != nil {
		if !plainAnswerStrings(a) {
			return nil, false
		}
		key("answer")
		b = appendAnswer(b, a)
	}
	if !raw("result", d.Result) {
		return nil, false
	}
	return append(b, '}'), true
}

// onlyHot reports whether every field encodeHot does not write is zero.
func (d *evData) onlyHot() bool {
	return d.Status == 0 && d.Retry == nil && d.RetryAt == nil && d.FireAt == nil && !d.Immediate &&
		d.Token == "" && d.Metadata == nil && d.Conflict == "" && d.Hook == 0 && d.Webhook == nil &&
		d.Agent == nil && d.Response == nil && d.Index == 0 && d.Payload == nil && d.AgentRequest == nil &&
		d.CallID == "" && d.Answered == 0 && d.Value == nil && d.Error == nil && d.Reason == "" &&
		d.Stream == "" && d.Data == "" && d.Produced == 0 && d.Step == 0 && !d.Cut &&
		d.FromVersion == 0 && d.FromHash == ""
}

// detailJSON encodes a run's detail, stored with its record at every
// commit, as json.Marshal does: by hand when it holds no error and its
// result and stall reason need no escaping (TestDetailJSONLikeMarshal).
func detailJSON(d runDetail) []byte {
	if d.Error != nil || (len(d.Result) > 0 && !jsonwire.PlainRaw(d.Result)) || !jsonwire.PlainString(d.Stalled) {
		return mustJSON(d)
	}
	b := make([]byte, 0, 48+len(d.Result)+len(d.Stalled))
	b = append(b, '{')
	if w := d.Waiting; w != nil {
		b = append(b, `"waiting":{"mode":`...)
		b = strconv.AppendUint(b, uint64(w.Mode), 10)
		b = append(b, `,"futures":`...)
		if w.Futures == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, f := range w.Futures {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(f), 10)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if len(d.Result) > 0 {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(b, `"result":`...), d.Result...)
	}
	if d.Stalled != "" {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, `"stalled":"`...), d.Stalled...), '"')
	}
	return append(b, '}')
}

// answerJSON encodes a question's answer, the value of its future, as
// json.Marshal does: by hand when its strings need no escaping.
func answerJSON(a *abi.AskAnswer) []byte {
	if a == nil || !plainAnswerStrings(a) {
		return mustJSON(a)
	}
	return appendAnswer(make([]byte, 0, 40+len(a.Status)+len(a.OptionID)+len(a.Text)), a)
}

// plainAnswerStrings reports whether json.Marshal writes each of a's
// strings as it is.
func plainAnswerStrings(a *abi.AskAnswer) bool {
	return jsonwire.PlainString(a.Status) && jsonwire.PlainString(a.OptionID) && jsonwire.PlainString(a.Text)
}

// appendAnswer appends a's encoding in json.Marshal's layout; its
// strings must be plain (plainAnswerStrings).
func appendAnswer(b []byte, a *abi.AskAnswer) []byte {
	b = append(append(append(b, `{"status":"`...), a.Status...), '"')
	if a.OptionID != "" {
		b = append(append(append(b, `,"optionId":"`...), a.OptionID...), '"')
	}
	if a.Text != "" {
		b = append(append(append(b, `,"text":"`...), a.Text...), '"')
	}
	return append(b, '}')
}
