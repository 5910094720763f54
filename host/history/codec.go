package history

import (
	"encoding/json"
	"github.com/sandflow/sandflow/internal/jsonutil"
	"math"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// The host's JSON codec of its own records: event data (Data), a run's
// detail, a question's answer and request, and a step's outcome. Every
// event is encoded once, when it is recorded, and decoded at every replay
// and resume; encoding/json's reflection was most of both. The values
// are written and read here field by field, in Data's order, with the
// primitives of abi/jsonwire, which write json.Marshal's bytes and read
// what json.Unmarshal reads; what this codec does not read or write (a
// few nested payloads of rare kinds, a key it does not know) goes to
// encoding/json, which also judges what is malformed. The differential
// fuzz tests in codec_internal_test.go hold the two to the same
// results on every input.

// encodeHot encodes d as json.Marshal does, byte for byte, without its
// reflection. It reports false for what it leaves to json.Marshal: data
// holding a webhook spec, an agent's request or result, or an HTTP
// response (the payloads of the rarer kinds), or a value json.Marshal
// refuses.
func encodeHot(d *Data) ([]byte, bool) {
	if d.Webhook != nil || d.Agent != nil || d.Response != nil || d.AgentRequest != nil {
		return nil, false
	}
	b := make([]byte, 0, 96+len(d.Input)+len(d.Request)+len(d.Result)+len(d.Seed)+len(d.ModuleHash)+len(d.Data)+len(d.Value))
	// Every member is written with a comma before it; the first comma
	// becomes the opening brace.
	ok := true
	raw := func(key string, v []byte) {
		if len(v) > 0 && ok {
			b = append(b, key...)
			b, ok = jsonwire.AppendRaw(b, v)
		}
	}
	b = appendStr(b, `,"tool":`, d.Tool)
	b = appendStr(b, `,"plugin":`, d.Plugin)
	b = appendInt(b, `,"version":`, int64(d.Version))
	b = appendStr(b, `,"moduleHash":`, d.ModuleHash)
	raw(`,"input":`, d.Input)
	b = appendStr(b, `,"seed":`, d.Seed)
	b = appendFlag(b, `,"noAsk":true`, d.NoAsk)
	b = appendFlag(b, `,"serve":true`, d.Serve)
	b = appendFlag(b, `,"sharedInit":true`, d.SharedInit)
	if len(d.Agents) > 0 {
		b = append(b, `,"agents":`...)
		for i, a := range d.Agents {
			b = append(b, ',')
			if i == 0 {
				b[len(b)-1] = '['
			}
			b = jsonwire.AppendString(append(b, `{"name":`...), a.Name)
			b = jsonwire.AppendString(append(b, `,"description":`...), a.Description)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendStr(b, `,"url":`, d.URL)
	b = appendStr(b, `,"baseUrl":`, d.BaseURL)
	b = appendInt(b, `,"activation":`, int64(d.Activation))
	b = appendInt(b, `,"op":`, int64(d.Op))
	b = appendStr(b, `,"kind":`, d.Kind)
	b = appendStr(b, `,"name":`, d.Name)
	b = appendInt(b, `,"status":`, int64(d.Status))
	b = appendInt(b, `,"attempt":`, int64(d.Attempt))
	if r := d.Retry; r != nil {
		b = append(b, `,"retry":`...)
		start := len(b)
		b = appendInt(b, `,"maxAttempts":`, int64(r.MaxAttempts))
		b = appendInt(b, `,"initialBackoffMs":`, r.InitialBackoffMs)
		b = appendInt(b, `,"maxBackoffMs":`, r.MaxBackoffMs)
		if r.BackoffFactor != 0 && ok {
			b, ok = jsonwire.AppendFloat(append(b, `,"backoffFactor":`...), r.BackoffFactor, 64)
		}
		b = closeObject(b, start)
	}
	if d.RetryAt != nil && ok {
		b, ok = jsonwire.AppendTime(append(b, `,"retryAt":`...), *d.RetryAt)
	}
	if d.FireAt != nil && ok {
		b, ok = jsonwire.AppendTime(append(b, `,"fireAt":`...), *d.FireAt)
	}
	b = appendFlag(b, `,"immediate":true`, d.Immediate)
	b = appendStr(b, `,"askId":`, d.AskID)
	raw(`,"request":`, d.Request)
	if d.Answer != nil {
		b = appendAnswer(append(b, `,"answer":`...), d.Answer)
	}
	b = appendStr(b, `,"token":`, d.Token)
	raw(`,"metadata":`, d.Metadata)
	b = appendStr(b, `,"conflict":`, d.Conflict)
	b = appendInt(b, `,"hook":`, int64(d.Hook))
	b = appendInt(b, `,"index":`, int64(d.Index))
	raw(`,"payload":`, d.Payload)
	b = appendStr(b, `,"callId":`, d.CallID)
	b = appendInt(b, `,"answered":`, int64(d.Answered))
	raw(`,"value":`, d.Value)
	raw(`,"result":`, d.Result)
	if d.Error != nil && ok {
		b, ok = appendErrorObject(append(b, `,"error":`...), d.Error)
	}
	b = appendStr(b, `,"reason":`, d.Reason)
	b = appendStr(b, `,"stream":`, d.Stream)
	b = appendStr(b, `,"data":`, d.Data)
	b = appendInt(b, `,"produced":`, d.Produced)
	b = appendInt(b, `,"step":`, int64(d.Step))
	b = appendFlag(b, `,"cut":true`, d.Cut)
	b = appendInt(b, `,"fromVersion":`, int64(d.FromVersion))
	b = appendStr(b, `,"fromHash":`, d.FromHash)
	if !ok {
		return nil, false
	}
	return closeObject(b, 0), true
}

// appendStr appends a string member, left out when empty (omitempty).
func appendStr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return jsonwire.AppendString(append(b, key...), v)
}

// appendInt appends an integer member, left out when zero (omitempty).
func appendInt(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return appendInt64(append(b, key...), n)
}

func appendInt64(b []byte, n int64) []byte {
	if n >= 0 && n < 10 {
		return append(b, byte('0'+n))
	}
	return jsonwire.AppendInt(b, n)
}

// appendFlag appends member, `,"key":true`, when v is set (omitempty).
func appendFlag(b []byte, member string, v bool) []byte {
	if !v {
		return b
	}
	return append(b, member...)
}

// closeObject ends an object whose members, from b[start], were each
// written with a comma before them: the first comma becomes its opening
// brace, or the object is {} when it has none.
func closeObject(b []byte, start int) []byte {
	if len(b) == start {
		return append(b, '{', '}')
	}
	b[start] = '{'
	return append(b, '}')
}

// appendAnswer appends a question's answer as json.Marshal writes it.
func appendAnswer(b []byte, a *abi.AskAnswer) []byte {
	b = jsonwire.AppendString(append(b, `{"status":`...), a.Status)
	b = appendStr(b, `,"optionId":`, a.OptionID)
	b = appendStr(b, `,"text":`, a.Text)
	return append(b, '}')
}

// appendErrorObject appends an error as json.Marshal writes it; false
// where it fails (details that are not JSON).
func appendErrorObject(b []byte, e *abi.ErrorObject) ([]byte, bool) {
	b = jsonwire.AppendString(append(b, `{"type":`...), e.Type)
	b = jsonwire.AppendString(append(b, `,"message":`...), e.Message)
	b = appendFlag(b, `,"retryable":true`, e.Retryable)
	b = appendInt(b, `,"retryAfterMs":`, e.RetryAfterMs)
	ok := true
	if len(e.Details) > 0 {
		b, ok = jsonwire.AppendRaw(append(b, `,"details":`...), e.Details)
	}
	return append(b, '}'), ok
}

// EncodeDetail encodes a run's detail, stored with its record at every
// commit, as json.Marshal does.
func EncodeDetail(d Detail) []byte {
	b := make([]byte, 0, 48+len(d.Result)+len(d.Stalled))
	if w := d.Waiting; w != nil {
		b = append(b, `,"waiting":{"mode":`...)
		b = jsonwire.AppendUint(b, uint64(w.Mode))
		b = append(b, `,"futures":`...)
		if w.Futures == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, f := range w.Futures {
				if i > 0 {
					b = append(b, ',')
				}
				b = jsonwire.AppendUint(b, uint64(f))
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	ok := true
	if len(d.Result) > 0 {
		b, ok = jsonwire.AppendRaw(append(b, `,"result":`...), d.Result)
	}
	if d.Error != nil && ok {
		b, ok = appendErrorObject(append(b, `,"error":`...), d.Error)
	}
	if !ok {
		return jsonutil.Must(d) // which panics, as it did for such a detail
	}
	b = appendStr(b, `,"stalled":`, d.Stalled)
	return closeObject(b, 0)
}

// EncodeAnswer encodes a question's answer, the value of its future, as
// json.Marshal does.
func EncodeAnswer(a *abi.AskAnswer) []byte {
	if a == nil {
		return []byte("null")
	}
	return appendAnswer(make([]byte, 0, 40+len(a.Status)+len(a.OptionID)+len(a.Text)), a)
}

// EncodeAskRequest encodes req as json.Marshal does, byte for byte.
func EncodeAskRequest(req abi.AskRequest) []byte {
	if b, ok := abi.AppendAskRequestJSON(make([]byte, 0, 64+len(req.Prompt)+len(req.Title)+48*len(req.Options)), req); ok {
		return b
	}
	return jsonutil.Must(req)
}

// decodeEvFast decodes event data into a zero Data (but for what
// ClearHot clears) as json.Unmarshal would, reporting whether it did, and
// full when it set a field ClearHot does not clear. When it did not, it
// has cleared what it set. Kinds the host writes in one layout
// (decodeLaid) are matched against it first.
func decodeEvFast(kind string, b []byte, d *Data, strs map[string]string) (ok, full bool) {
	if decodeLaid(kind, b, d, strs) {
		return true, false
	}
	ok, full = decodeHotFields(b, d, strs)
	if !ok {
		if full {
			*d = Data{}
		} else {
			d.ClearHot()
		}
	}
	return ok, full
}

// decodeHot is decodeEvFast without the layouts: the general reader.
func decodeHot(b []byte, d *Data, strs map[string]string) bool {
	ok, full := decodeHotFields(b, d, strs)
	if !ok {
		if full {
			*d = Data{}
		} else {
			d.ClearHot()
		}
	}
	return ok
}

// ClearHot zeroes the fields of the kinds a long log is mostly made of,
// which decodeHotFields sets without reporting full: Data is 600 bytes,
// and copying or clearing all of it for every event of a long log was a
// good part of decoding it.
func (d *Data) ClearHot() {
	d.Op, d.Attempt, d.Activation = 0, 0, 0
	d.Name, d.Kind, d.AskID = "", "", ""
	d.Input, d.Result, d.Request = nil, nil, nil
	d.Answer = nil
	d.Tool, d.Plugin, d.Version, d.ModuleHash, d.Seed = "", "", 0, "", ""
	d.NoAsk, d.Serve, d.SharedInit = false, false, false
	d.Agents, d.URL, d.BaseURL = nil, "", ""
}

// decodeHotFields reads an object of Data's keys into d, reporting
// whether it did, and full when it set a field ClearHot does not clear.
// It may leave d half set when it did not.
func decodeHotFields(b []byte, d *Data, strs map[string]string) (ok, full bool) {
	// The members are walked here rather than by jsonwire.Object, and the
	// hot keys are read in the loop rather than by a function per member:
	// a call per member was a good part of this path's time, and it
	// decodes every event of a long log the layouts do not take.
	i, empty, ok := jsonwire.Open(b, jsonwire.SkipSpace(b, 0), '{')
	if !ok {
		return false, false
	}
	for more := !empty; more; {
		var key []byte
		if key, i, ok = jsonwire.Key(b, i); !ok {
			return false, full
		}
		switch string(key) { // compared without a copy
		case "op":
			i, ok = readU32(b, i, &d.Op)
		case "attempt":
			i, ok = readInt(b, i, &d.Attempt)
		case "activation":
			i, ok = readInt(b, i, &d.Activation)
		case "name":
			i, ok = readStr(b, i, &d.Name, strs)
		case "kind":
			i, ok = readStr(b, i, &d.Kind, strs)
		case "input":
			i, ok = readRaw(b, i, &d.Input)
		case "result":
			i, ok = readRaw(b, i, &d.Result)
		case "askId":
			i, ok = readStr(b, i, &d.AskID, nil)
		case "request":
			i, ok = readRaw(b, i, &d.Request)
		case "answer":
			i, ok = readAnswer(b, i, &d.Answer)
		default:
			i, ok = d.decodeCreated(key, b, i, strs, &full)
		}
		if !ok {
			return false, full
		}
		if i, more, ok = jsonwire.Next(b, i, '}'); !ok {
			return false, full
		}
	}
	return jsonwire.End(b, i), full
}

// decodeCreated reads the value of key at b[i], one of run_created's keys
// (which ClearHot clears too); any other key sets *full.
func (d *Data) decodeCreated(key, b []byte, i int, strs map[string]string, full *bool) (int, bool) {
	switch string(key) {
	case "tool":
		return readStr(b, i, &d.Tool, strs)
	case "plugin":
		return readStr(b, i, &d.Plugin, strs)
	case "version":
		return readInt(b, i, &d.Version)
	case "moduleHash":
		return readStr(b, i, &d.ModuleHash, nil)
	case "seed":
		return readStr(b, i, &d.Seed, nil)
	case "noAsk":
		return readBool(b, i, &d.NoAsk)
	case "serve":
		return readBool(b, i, &d.Serve)
	case "sharedInit":
		return readBool(b, i, &d.SharedInit)
	case "agents":
		// A second list would be decoded into the first by
		// encoding/json, keeping what the second lacks.
		if d.Agents != nil {
			return 0, false
		}
		as, j, ok := readAgents(b, i)
		d.Agents = as
		return j, ok
	case "url":
		return readStr(b, i, &d.URL, nil)
	case "baseUrl":
		return readStr(b, i, &d.BaseURL, nil)
	}
	*full = true
	return d.decodeCold(key, b, i)
}

// decodeCold reads the value of one of the keys of the rarer kinds at
// b[i]; false for a key it does not read (another, a nested payload it
// leaves to encoding/json, or one spelt in another case, which
// encoding/json matches).
func (d *Data) decodeCold(key, b []byte, i int) (int, bool) {
	switch string(key) {
	case "status":
		return readU32(b, i, &d.Status)
	case "retry":
		return readRetry(b, i, &d.Retry)
	case "retryAt":
		return readTime(b, i, &d.RetryAt)
	case "fireAt":
		return readTime(b, i, &d.FireAt)
	case "immediate":
		return readBool(b, i, &d.Immediate)
	case "token":
		return readStr(b, i, &d.Token, nil)
	case "metadata":
		return readRaw(b, i, &d.Metadata)
	case "conflict":
		return readStr(b, i, &d.Conflict, nil)
	case "hook":
		return readU32(b, i, &d.Hook)
	case "index":
		return readInt(b, i, &d.Index)
	case "payload":
		return readRaw(b, i, &d.Payload)
	case "callId":
		return readStr(b, i, &d.CallID, nil)
	case "answered":
		return readInt(b, i, &d.Answered)
	case "value":
		return readRaw(b, i, &d.Value)
	case "error":
		return readErrorObject(b, i, &d.Error)
	case "reason":
		return readStr(b, i, &d.Reason, nil)
	case "stream":
		return readStr(b, i, &d.Stream, nil)
	case "data":
		return readStr(b, i, &d.Data, nil)
	case "produced":
		return readInt(b, i, &d.Produced)
	case "step":
		return readU32(b, i, &d.Step)
	case "cut":
		return readBool(b, i, &d.Cut)
	case "fromVersion":
		return readInt(b, i, &d.FromVersion)
	case "fromHash":
		return readStr(b, i, &d.FromHash, nil)
	}
	return 0, false
}

// readStr reads a string at b[i] into *dst, interned in strs (which may
// be nil); null leaves *dst as it is, as json.Unmarshal does.
func readStr(b []byte, i int, dst *string, strs map[string]string) (int, bool) {
	if i < len(b) && b[i] == 'n' && jsonwire.IsNull(b, i) {
		return i + 4, true
	}
	v, j, ok := jsonwire.ReadString(b, i)
	if !ok {
		return 0, false
	}
	*dst = intern(strs, v)
	return j, true
}

// readInt reads an integer at b[i] into *dst; null leaves it. The host's
// ints are 64 bits, as int64s are.
func readInt[T int | int64](b []byte, i int, dst *T) (int, bool) {
	if i < len(b) && b[i] == 'n' && jsonwire.IsNull(b, i) {
		return i + 4, true
	}
	n, j, ok := jsonwire.ReadInt(b, i, math.MinInt64, math.MaxInt64)
	if ok {
		*dst = T(n)
	}
	return j, ok
}

// readRaw reads any value at b[i] into *dst, as its bytes (aliasing b),
// as json.Unmarshal stores a json.RawMessage (null too).
func readRaw(b []byte, i int, dst *json.RawMessage) (int, bool) {
	v, j, ok := jsonwire.ReadRaw(b, i)
	*dst = v
	return j, ok
}

// readU32 reads a uint32 at b[i] into *dst; null leaves it.
func readU32(b []byte, i int, dst *uint32) (int, bool) {
	if i < len(b) && b[i] == 'n' && jsonwire.IsNull(b, i) {
		return i + 4, true
	}
	n, j, ok := jsonwire.ReadUint(b, i, math.MaxUint32)
	if ok {
		*dst = uint32(n)
	}
	return j, ok
}

// readBool reads a bool at b[i] into *dst; null leaves it.
func readBool(b []byte, i int, dst *bool) (int, bool) {
	if i < len(b) && b[i] == 'n' && jsonwire.IsNull(b, i) {
		return i + 4, true
	}
	v, j, ok := jsonwire.ReadBool(b, i)
	if ok {
		*dst = v
	}
	return j, ok
}

// readTime reads a time at b[i] into **dst: null makes it nil; else the
// time is decoded by its UnmarshalJSON, into the one *dst holds if any.
func readTime(b []byte, i int, dst **time.Time) (int, bool) {
	if jsonwire.IsNull(b, i) {
		*dst = nil
		return i + 4, true
	}
	j, ok := jsonwire.SkipValue(b, i)
	if !ok || b[i] != '"' {
		return 0, false
	}
	if *dst == nil {
		*dst = new(time.Time)
	}
	if (*dst).UnmarshalJSON(b[i:j]) != nil {
		return 0, false
	}
	return j, true
}

// readPointee reads an object at b[i] into **dst as json.Unmarshal reads
// one into a pointer: null makes it nil; else the members are read into
// the value *dst holds, if any (a second answer is decoded into the
// first), by member.
func readPointee[T any](b []byte, i int, dst **T, member func(v *T, key []byte, i int) (int, bool)) (int, bool) {
	if jsonwire.IsNull(b, i) {
		*dst = nil
		return i + 4, true
	}
	if *dst == nil {
		*dst = new(T)
	}
	v := *dst
	return jsonwire.Object(b, i, func(key []byte, i int) (int, bool) { return member(v, key, i) })
}

// readAnswer reads a question's answer at b[i] into **dst (readPointee).
func readAnswer(b []byte, i int, dst **abi.AskAnswer) (int, bool) {
	return readPointee(b, i, dst, func(a *abi.AskAnswer, key []byte, i int) (int, bool) {
		switch string(key) {
		case "status":
			return readStr(b, i, &a.Status, nil)
		case "optionId":
			return readStr(b, i, &a.OptionID, nil)
		case "text":
			return readStr(b, i, &a.Text, nil)
		}
		return 0, false
	})
}

// readErrorObject reads an error at b[i] into **dst (readPointee).
func readErrorObject(b []byte, i int, dst **abi.ErrorObject) (int, bool) {
	return readPointee(b, i, dst, func(e *abi.ErrorObject, key []byte, i int) (int, bool) {
		switch string(key) {
		case "type":
			return readStr(b, i, &e.Type, nil)
		case "message":
			return readStr(b, i, &e.Message, nil)
		case "retryable":
			return readBool(b, i, &e.Retryable)
		case "retryAfterMs":
			return readInt(b, i, &e.RetryAfterMs)
		case "details":
			return readRaw(b, i, &e.Details)
		}
		return 0, false
	})
}

// readRetry reads a retry policy at b[i] into **dst (readPointee).
func readRetry(b []byte, i int, dst **abi.RetryPolicy) (int, bool) {
	return readPointee(b, i, dst, func(r *abi.RetryPolicy, key []byte, i int) (int, bool) {
		switch string(key) {
		case "maxAttempts":
			return readInt(b, i, &r.MaxAttempts)
		case "initialBackoffMs":
			return readInt(b, i, &r.InitialBackoffMs)
		case "maxBackoffMs":
			return readInt(b, i, &r.MaxBackoffMs)
		case "backoffFactor":
			if jsonwire.IsNull(b, i) {
				return i + 4, true
			}
			f, j, ok := jsonwire.ReadFloat(b, i, 64)
			r.BackoffFactor = f
			return j, ok
		}
		return 0, false
	})
}

// readAgents reads a run's agents at b[i]: a list of objects of a name
// and a description. null reads as nil, [] as an empty list, as
// json.Unmarshal reads them.
func readAgents(b []byte, i int) ([]abi.AgentInfo, int, bool) {
	if jsonwire.IsNull(b, i) {
		return nil, i + 4, true
	}
	i, empty, ok := jsonwire.Open(b, i, '[')
	if !ok {
		return nil, 0, false
	}
	as := []abi.AgentInfo{}
	for more := !empty; more; {
		var a abi.AgentInfo
		i, ok = jsonwire.Object(b, i, func(key []byte, i int) (int, bool) {
			switch string(key) {
			case "name":
				return readStr(b, i, &a.Name, nil)
			case "description":
				return readStr(b, i, &a.Description, nil)
			}
			return 0, false
		})
		if !ok {
			return nil, 0, false
		}
		as = append(as, a)
		if i, more, ok = jsonwire.Next(b, i, ']'); !ok {
			return nil, 0, false
		}
	}
	return as, i, true
}

// maxInterned bounds an intern table: a log's names are few, and one
// with many need not grow it without end.
const maxInterned = 256

// intern returns v as a string, the one in strs if it is there.
func intern(strs map[string]string, v []byte) string {
	if s, ok := strs[string(v)]; ok { // looked up without a copy
		return s
	}
	s := string(v)
	if strs != nil && len(strs) < maxInterned {
		strs[s] = s
	}
	return s
}

// decodeLaid decodes the data of the events a long log is mostly made of
// (run_resumed, step_started, step_completed) as encodeHot lays them out
// (compact, in Data's field order), matching each key where it must be
// rather than reading keys and looking them up: reading keys was most of
// decodeHot's time. Values are read by the same readers, so whatever it
// takes it decodes as decodeHot does (TestDecodeLaid). It reports false
// for anything else, with the hot fields cleared.
func decodeLaid(kind string, b []byte, d *Data, strs map[string]string) bool {
	var ok bool
	switch kind {
	case KindRunResumed:
		ok = laidResumed(b, d)
	case KindStepStarted:
		ok = laidStepStarted(b, d, strs)
	case KindStepCompleted:
		ok = laidStepCompleted(b, d)
	default:
		return false
	}
	if !ok {
		d.ClearHot()
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
func laidResumed(b []byte, d *Data) bool {
	if len(b) == 2 {
		return b[0] == '{' && b[1] == '}'
	}
	if !hasAt(b, 0, `{"activation":`) {
		return false
	}
	n, i, ok := jsonwire.ReadInt(b, len(`{"activation":`), math.MinInt, math.MaxInt)
	d.Activation = int(n)
	return ok && endsAt(b, i)
}

// {"input":V,"op":N,"name":"S","attempt":N}, input left out when empty
func laidStepStarted(b []byte, d *Data, strs map[string]string) bool {
	if len(b) < 2 || b[0] != '{' {
		return false
	}
	i := 1
	if hasAt(b, i, `"input":`) {
		v, j, ok := jsonwire.ReadRaw(b, i+len(`"input":`))
		if !ok || !hasAt(b, j, ",") {
			return false
		}
		d.Input, i = v, j+1
	}
	if !hasAt(b, i, `"op":`) {
		return false
	}
	n, i, ok := jsonwire.ReadUint(b, i+len(`"op":`), math.MaxUint32)
	if !ok || !hasAt(b, i, `,"name":`) {
		return false
	}
	d.Op = uint32(n)
	v, i, ok := jsonwire.ReadString(b, i+len(`,"name":`))
	if !ok || !hasAt(b, i, `,"attempt":`) {
		return false
	}
	d.Name = intern(strs, v)
	a, i, ok := jsonwire.ReadInt(b, i+len(`,"attempt":`), math.MinInt, math.MaxInt)
	d.Attempt = int(a)
	return ok && endsAt(b, i)
}

// {"op":N,"attempt":N,"result":V}, result left out when empty
func laidStepCompleted(b []byte, d *Data) bool {
	if !hasAt(b, 0, `{"op":`) {
		return false
	}
	n, i, ok := jsonwire.ReadUint(b, len(`{"op":`), math.MaxUint32)
	if !ok || !hasAt(b, i, `,"attempt":`) {
		return false
	}
	d.Op = uint32(n)
	a, i, ok := jsonwire.ReadInt(b, i+len(`,"attempt":`), math.MinInt, math.MaxInt)
	if !ok {
		return false
	}
	d.Attempt = int(a)
	if hasAt(b, i, `,"result":`) {
		v, j, ok := jsonwire.ReadRaw(b, i+len(`,"result":`))
		if !ok {
			return false
		}
		d.Result, i = v, j
	}
	return endsAt(b, i)
}

// A question's payload is decoded when the guest asks, encoded into its
// ask_opened event, and decoded from it again to answer and to list the
// question, at every question of every run. Payloads in the layout
// json.Marshal writes (as the Go SDK does) are read here by hand;
// anything else goes to encoding/json, which also judges what is
// malformed.

// DecodeAskRequest decodes payload into a zero req if it is in json.Marshal's
// layout of an AskRequest, reporting whether it was; req is then what
// jsonutil.DecodeStrict would make of it.
func DecodeAskRequest(payload []byte, req *abi.AskRequest) bool {
	p := jsonwire.Reader{B: payload}
	if !p.Lit(`{"prompt":`) || !p.Str(&req.Prompt) {
		return false
	}
	if p.Lit(`,"title":`) && !p.Str(&req.Title) {
		return false
	}
	if p.Lit(`,"display":`) && !p.Str(&req.Display) {
		return false
	}
	if p.Lit(`,"options":[`) {
		for {
			var o abi.AskOption
			if !p.Lit(`{"id":`) || !p.Str(&o.ID) || !p.Lit(`,"label":`) || !p.Str(&o.Label) {
				return false
			}
			if p.Lit(`,"description":`) && !p.Str(&o.Description) {
				return false
			}
			if p.Lit(`,"style":`) && !p.Str(&o.Style) {
				return false
			}
			if !p.Lit(`}`) {
				return false
			}
			req.Options = append(req.Options, o)
			if p.Lit(`]`) {
				break
			}
			if !p.Lit(`,`) {
				return false
			}
		}
	}
	if p.Lit(`,"allowFreeform":true`) {
		req.AllowFreeform = true
	}
	return p.Lit(`}`) && len(p.B) == 0
}

// DecodeOutcome decodes a complete or step_complete payload, as
// jsonutil.DecodeStrict does. The payload of a result, {"result":v} with v compact
// and plain (as the Go SDK writes it), is read by hand; out.Result then
// aliases payload.
func DecodeOutcome(payload []byte, out *abi.Outcome) string {
	const head = `{"result":`
	if len(payload) > len(head)+1 && string(payload[:len(head)]) == head && payload[len(payload)-1] == '}' {
		if v := payload[len(head) : len(payload)-1]; jsonwire.PlainRaw(v) {
			*out = abi.Outcome{Result: v}
			return ""
		}
	}
	return jsonutil.DecodeStrict(payload, out)
}
