package host

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// laidSeeds are event data of the kinds decodeLaid reads, as the host
// writes them and near it.
var laidSeeds = []struct{ kind, data string }{
	{EvRunResumed, `{}`},
	{EvRunResumed, `{"activation":1}`},
	{EvRunResumed, `{"activation":2147483647}`},
	{EvStepStarted, `{"input":[1,"two",{"3":null}],"op":2,"name":"inc","attempt":1}`},
	{EvStepStarted, `{"op":2,"name":"inc","attempt":1}`},
	{EvStepStarted, `{"input":0,"op":4294967295,"name":"a b","attempt":3}`},
	{EvStepCompleted, `{"op":2,"attempt":1,"result":{"a":[true,false,null,-1.5e-3,"x"]}}`},
	{EvStepCompleted, `{"op":2,"attempt":1}`},
	{EvStepCompleted, `{"op":7,"attempt":2,"result":"\ud83d\ude00"}`},
	// taken by decodeHot, or by nothing but the general decoder
	{EvRunResumed, ` {}`}, {EvRunResumed, `{"activation":1} `}, {EvRunResumed, `{"activation":01}`},
	{EvRunResumed, `{"activation":1,"activation":2}`}, {EvRunResumed, `{"op":1}`},
	{EvStepStarted, `{"op":2,"name":"inc","attempt":1,"retry":{"maxAttempts":3}}`},
	{EvStepStarted, `{"name":"inc","op":2,"attempt":1}`}, {EvStepStarted, `{"op":2,"name":"in\u0063","attempt":1}`},
	{EvStepStarted, `{"input":1 ,"op":2,"name":"inc","attempt":1}`}, {EvStepStarted, `{"input":,"op":2,"name":"inc","attempt":1}`},
	{EvStepCompleted, `{"op":2,"attempt":1,"result":1,"result":2}`}, {EvStepCompleted, `{"op":2,"attempt":-1}`},
	{EvStepCompleted, `{"op":4294967296,"attempt":1}`}, {EvStepCompleted, `{"op":2,"attempt":1,"result":[1,]}`},
	{EvStepFailed, `{"op":2,"attempt":1}`},
}

// checkLaid decodes data with decodeLaid and decodeHot: what decodeLaid
// takes, decodeHot must take too and decode the same; what it refuses,
// it leaves as it found it (zero).
func checkLaid(t *testing.T, kind string, data []byte) bool {
	t.Helper()
	var laid, hot evData
	ok := decodeLaid(kind, data, &laid, map[string]string{})
	if !ok {
		if !reflect.DeepEqual(laid, evData{}) {
			t.Fatalf("%s %q: refused, but set %+v", kind, data, laid)
		}
		return false
	}
	if !decodeHot(data, &hot, nil) {
		t.Fatalf("%s %q: taken by decodeLaid, refused by decodeHot", kind, data)
	}
	if !reflect.DeepEqual(laid, hot) {
		t.Fatalf("%s %q:\nlaid %+v\nhot  %+v", kind, data, laid, hot)
	}
	return true
}

// TestDecodeLaid: decodeLaid agrees with decodeHot on the seeds, their
// truncations and random changes, and takes what the host's encoder
// writes for the kinds it reads.
func TestDecodeLaid(t *testing.T) {
	taken := 0
	for _, s := range laidSeeds {
		if checkLaid(t, s.kind, []byte(s.data)) {
			taken++
		}
		for n := range len(s.data) {
			checkLaid(t, s.kind, []byte(s.data[:n]))
		}
	}
	if taken != 9 {
		t.Errorf("decodeLaid took %d seeds, want the first 9", taken)
	}
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte(`{}[]":,0123456789-+.eE \tnulltruefalse\\u"aé` + "\x00")
	for range 30000 {
		s := laidSeeds[r.IntN(len(laidSeeds))]
		b := []byte(s.data)
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		checkLaid(t, s.kind, b)
	}
	for i, d := range []evData{
		{Activation: 3}, {},
		{Input: []byte(`{"n":1}`), Op: 4, Name: "inc", Attempt: 1}, {Op: 4, Name: "inc", Attempt: 2},
		{Op: 4, Attempt: 1, Result: []byte(`[1,2]`)}, {Op: 9, Attempt: 1},
	} {
		kind := []string{EvRunResumed, EvRunResumed, EvStepStarted, EvStepStarted, EvStepCompleted, EvStepCompleted}[i]
		b, ok := encodeHot(&d)
		if !ok || !checkLaid(t, kind, b) {
			t.Errorf("%s %s: the host's encoding is not taken", kind, b)
		}
	}
}

func FuzzDecodeLaid(f *testing.F) {
	kinds := []string{EvRunResumed, EvStepStarted, EvStepCompleted}
	for _, s := range laidSeeds {
		for k, kind := range kinds {
			if kind == s.kind {
				f.Add(uint8(k), []byte(s.data))
			}
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, data []byte) { checkLaid(t, kinds[int(k)%len(kinds)], data) })
}

// BenchmarkDecodeLaid is BenchmarkDecodeHot's events through decodeLaid
// first, as decodeEvDataInto reads them.
func BenchmarkDecodeLaid(b *testing.B) {
	type ev struct {
		kind string
		data []byte
	}
	var evs []ev
	for i := range 1000 {
		evs = append(evs,
			ev{EvStepStarted, fmt.Appendf(nil, `{"input":%d,"op":%d,"name":"echo","attempt":1}`, i, i+1)},
			ev{EvStepCompleted, fmt.Appendf(nil, `{"op":%d,"attempt":1,"result":%d}`, i+1, i)},
			ev{EvRunResumed, fmt.Appendf(nil, `{"activation":%d}`, i+1)})
	}
	var d evData
	strs := map[string]string{}
	for b.Loop() {
		for _, e := range evs {
			d.clearHot()
			if !decodeLaid(e.kind, e.data, &d, strs) {
				b.Fatalf("%s: not taken", e.data)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
