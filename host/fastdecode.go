package host

import (
	"bytes"
	"math"

	"github.com/sandflow/sandflow/abi"
)

// decodeHot decodes the event data of the kinds a long log is made of
// (run_resumed, step_started, step_completed, ask_opened, ask_settled: an
// object of op, attempt, activation, name, kind, input, result, askId,
// request and an answer of plain strings), and run_created's (plain
// strings, a version, flags, agents, the input) into a zero evData
// without reflection. It reports false, having set nothing the caller
// keeps, for anything else: another key, an escape in a name, a number
// that is not a plain non-negative integer, JSON it does not accept. The
// caller then decodes with the general decoder, which also judges what is
// malformed, so both paths agree on every input (TestDecodeHot).
//
// Names and kinds are taken from strs when it holds them, and added to it
// while it is small: a long log repeats a few step names, and a string
// per event was most of what decoding it allocated. strs may be nil.
func decodeHot(b []byte, d *evData, strs map[string]string) bool {
	if decodeHotFields(b, d, strs) {
		return true
	}
	d.clearHot()
	return false
}

// clearHot zeroes the fields decodeHot sets: evData is 600 bytes, and
// copying or clearing all of it for every event of a long log was a good
// part of decoding it.
func (d *evData) clearHot() {
	d.Op, d.Attempt, d.Activation = 0, 0, 0
	d.Name, d.Kind, d.AskID = "", "", ""
	d.Input, d.Result, d.Request = nil, nil, nil
	d.Answer = nil
	d.Tool, d.Plugin, d.Version, d.ModuleHash, d.Seed = "", "", 0, "", ""
	d.NoAsk, d.Serve, d.SharedInit = false, false, false
	d.Agents, d.URL, d.BaseURL = nil, "", ""
}

// decodeHotFields is decodeHot writing straight into d's fields, which it
// may leave half set when it fails.
func decodeHotFields(b []byte, d *evData, strs map[string]string) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainBytes(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		switch string(key) { // compared without a copy
		case "op":
			n, j, ok := plainUint(b, i, math.MaxUint32)
			if !ok {
				return false
			}
			d.Op, i = uint32(n), j
		case "attempt", "activation":
			n, j, ok := plainUint(b, i, math.MaxInt32)
			if !ok {
				return false
			}
			if string(key) == "attempt" {
				d.Attempt = int(n)
			} else {
				d.Activation = int(n)
			}
			i = j
		case "name", "kind":
			v, j, ok := plainBytes(b, i)
			if !ok {
				return false
			}
			s := intern(strs, v)
			if string(key) == "name" {
				d.Name = s
			} else {
				d.Kind = s
			}
			i = j
		case "input", "result", "request":
			j, ok := skipValue(b, i, 0)
			if !ok {
				return false
			}
			switch string(key) {
			case "input":
				d.Input = b[i:j:j]
			case "result":
				d.Result = b[i:j:j]
			default:
				d.Request = b[i:j:j]
			}
			i = j
		case "askId", "tool", "plugin", "moduleHash", "seed", "url", "baseUrl":
			v, j, ok := plainBytes(b, i)
			if !ok {
				return false
			}
			switch string(key) {
			case "askId":
				d.AskID = string(v)
			case "tool", "plugin":
				s := intern(strs, v)
				if string(key) == "tool" {
					d.Tool = s
				} else {
					d.Plugin = s
				}
			case "moduleHash":
				d.ModuleHash = string(v)
			case "seed":
				d.Seed = string(v)
			case "url":
				d.URL = string(v)
			default:
				d.BaseURL = string(v)
			}
			i = j
		case "version":
			n, j, ok := plainUint(b, i, math.MaxInt32)
			if !ok {
				return false
			}
			d.Version, i = int(n), j
		case "noAsk", "serve", "sharedInit":
			var v bool
			switch {
			case bytes.HasPrefix(b[i:], []byte("true")):
				v, i = true, i+4
			case bytes.HasPrefix(b[i:], []byte("false")):
				v, i = false, i+5
			default:
				return false
			}
			switch string(key) {
			case "noAsk":
				d.NoAsk = v
			case "serve":
				d.Serve = v
			default:
				d.SharedInit = v
			}
		case "agents":
			// A second list would be decoded into the first by
			// encoding/json, keeping what the second lacks.
			if d.Agents != nil {
				return false
			}
			as, j, ok := plainAgents(b, i)
			if !ok {
				return false
			}
			d.Agents, i = as, j
		case "answer":
			// A second answer would be decoded into the first by
			// encoding/json, keeping fields the second lacks.
			if d.Answer != nil {
				return false
			}
			a, j, ok := plainAnswer(b, i)
			if !ok {
				return false
			}
			d.Answer, i = a, j
		default:
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			if skipSpace(b, i+1) != len(b) {
				return false
			}
			return true
		}
		if b[i] != ',' {
			return false
		}
		i = skipSpace(b, i+1)
	}
}

// plainAgents reads a run's agents at b[i]: a list of objects whose keys
// are name and description, each a plain string.
func plainAgents(b []byte, i int) ([]AgentInfo, int, bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	as := []AgentInfo{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return as, i + 1, true
	}
	for {
		var a AgentInfo
		j, ok := plainObject(b, i, func(key, v []byte) bool {
			switch string(key) {
			case "name":
				a.Name = string(v)
			case "description":
				a.Description = string(v)
			default:
				return false
			}
			return true
		})
		if !ok {
			return nil, 0, false
		}
		as = append(as, a)
		i = skipSpace(b, j)
		if i < len(b) && b[i] == ']' {
			return as, i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return nil, 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// plainAnswer reads a question's answer at b[i]: an object whose keys are
// status, optionId and text, each a plain string.
func plainAnswer(b []byte, i int) (*abi.AskAnswer, int, bool) {
	a := new(abi.AskAnswer)
	j, ok := plainObject(b, i, func(key, v []byte) bool {
		switch string(key) {
		case "status":
			a.Status = string(v)
		case "optionId":
			a.OptionID = string(v)
		case "text":
			a.Text = string(v)
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil, 0, false
	}
	return a, j, true
}

// plainObject reads an object at b[i] whose values are plain strings,
// giving set each key and value (which alias b) in order; set reports
// whether it takes the key. It returns the index after the object.
func plainObject(b []byte, i int, set func(key, v []byte) bool) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		key, j, ok := plainBytes(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		v, j, ok := plainBytes(b, skipSpace(b, i+1))
		if !ok || !set(key, v) {
			return 0, false
		}
		i = skipSpace(b, j)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainBytes reads a string at b[i] without escapes or control
// characters, returning its bytes (aliasing b) and the index after it.
func plainBytes(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false // escapes and non-ASCII: the general decoder
		}
	}
	return nil, 0, false
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

// plainUint reads a non-negative integer without sign, fraction or
// exponent, at most limit.
func plainUint(b []byte, i int, limit uint64) (uint64, int, bool) {
	j := i
	var n uint64
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		n = n*10 + uint64(b[j]-'0')
		if n > limit {
			return 0, 0, false
		}
		j++
	}
	if j == i || (b[i] == '0' && j > i+1) {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	return n, j, true
}

// skipValue returns the index after the JSON value at b[i], checking it
// strictly.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > 1000 {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1, true
		}
		for {
			if c == '{' {
				j, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = skipSpace(b, j)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipSpace(b, i+1)
			}
			j, ok := skipValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipSpace(b, j)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == closing {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipSpace(b, i+1)
		}
	case c == '"':
		return skipString(b, i)
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit), true
		}
	}
	return 0, false
}

func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			j++
			if j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, false
					}
				}
				j += 4
			default:
				return 0, false
			}
		case c >= 0x80:
			return 0, false // non-ASCII: the general decoder checks UTF-8
		}
	}
	return 0, false
}

// skipNumber skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}
