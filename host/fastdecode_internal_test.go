package host

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"
)

// hotSeeds are event data of the hot kinds as the host writes them, and
// near misses the fast path must leave to the general decoder.
var hotSeeds = []string{
	`{}`,
	`{"activation":1}`,
	`{"input":[1,"two",{"3":null}],"op":2,"name":"inc","attempt":1}`,
	`{"op":2,"attempt":1,"result":{"a":[true,false,null,-1.5e-3,"x\u00e9\n"]}}`,
	`{"op":4294967295,"attempt":2147483647}`,
	` { "op" : 1 , "name" : "a b" } `,
	`{"op":1,"op":2}`,
	`{"input":null}`,
	`{"result":"\ud83d\ude00"}`,
	`{"op":3,"askId":"ask_2345abcd","request":{"prompt":"Go on?","options":[{"id":"ok","label":"OK"}]}}`,
	`{"op":3,"askId":"ask_x","answer":{"status":"answered","optionId":"ok","text":"fine"}}`,
	`{"answer":{}}`,
	`{"answer": { "text" : "a" , "status":"s", "text":"b" } , "request":1,"request":[2]}`,
	`{"tool":"greet","plugin":"greet","version":3,"moduleHash":"ab12","input":{"name":"w"},"seed":"00ff","noAsk":true,"serve":true,"sharedInit":true,"agents":[{"name":"echo","description":"answers at once"}],"url":"http://h/runs/run_1","baseUrl":"http://h"}`,
	`{"agents":[],"sharedInit":false,"tool":"a","tool":"b"}`,
	`{"agents":[{},{"description":"d","name":"n","name":"m"}], "serve" : false }`,
	// left to the general decoder
	`{"op":4294967296}`, `{"op":-1}`, `{"op":1.0}`, `{"op":1e2}`, `{"op":01}`, `{"op":null}`,
	`{"name":"\u0041"}`, `{"name":"é"}`, `{"OP":1}`, `{"op":1,}`, `{"op":1}x`, `{"input":}`,
	`{"input":[1,]}`, `{"input":{"a"}}`, `{"input":"\x"}`, `{"input":"é"}`, `{"retry":{"maxAttempts":3}}`,
	`{"input":tru}`, `{"input":--1}`, `{"input":1.}`, `{"input":.5}`, `[]`, `null`, ``, `{`,
	`{"answer":null}`, `{"answer":{"status":1}}`, `{"answer":{"Status":"a"}}`, `{"answer":[]}`,
	`{"answer":{"status":"a"},"answer":{"text":"b"}}`, `{"answer":{"status":"a",}}`, `{"answer":{"status":"é"}}`,
	`{"askId":"é"}`, `{"askId":1}`, `{"request":}`, `{"answer":{"status":"a"}`,
	`{"agents":null}`, `{"agents":[{"name":1}]}`, `{"agents":[{"Name":"a"}]}`, `{"agents":[1]}`, `{"agents":[{}],"agents":[]}`,
	`{"agents":[{},]}`, `{"agents":{}}`, `{"version":-1}`, `{"version":"1"}`, `{"noAsk":1}`, `{"serve":truex}`,
	`{"noAsk":null}`, `{"tool":"a\"b"}`, `{"seed":null}`,
}

// checkHot decodes data both ways: when the fast path takes it, the
// general decoder must accept it too and give the same evData.
func checkHot(t *testing.T, data []byte) {
	t.Helper()
	var fast, general evData
	ok := decodeHot(data, &fast, map[string]string{})
	err := gojson.Unmarshal(data, &general)
	if !ok {
		if !reflect.DeepEqual(fast, evData{}) {
			t.Fatalf("%q: refused, but set %+v", data, fast)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: taken by the fast path, refused by the general decoder: %v", data, err)
	}
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("%q:\nfast    %+v\ngeneral %+v", data, fast, general)
	}
}

// TestDecodeHot: the fast path agrees with the general decoder on the
// seeds, on their truncations and on random byte changes of them.
func TestDecodeHot(t *testing.T) {
	taken := 0
	for _, s := range hotSeeds {
		var d evData
		if decodeHot([]byte(s), &d, nil) {
			taken++
		}
		checkHot(t, []byte(s))
		for n := range len(s) {
			checkHot(t, []byte(s[:n]))
		}
	}
	if taken != 16 {
		t.Errorf("the fast path took %d seeds, want the first 16", taken)
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]":,0123456789-+.eE \tnulltruefalse\\u"aé` + "\x00")
	for range 20000 {
		b := []byte(hotSeeds[r.IntN(len(hotSeeds))])
		for range 1 + r.IntN(3) {
			if len(b) == 0 {
				break
			}
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		checkHot(t, b)
	}
}

func FuzzDecodeHot(f *testing.F) {
	for _, s := range hotSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkHot(t, data) })
}

// BenchmarkDecodeHot decodes the event data of a long run of steps: a
// step_started, a step_completed and a run_resumed per step.
func BenchmarkDecodeHot(b *testing.B) {
	var evs [][]byte
	for i := range 1000 {
		evs = append(evs,
			fmt.Appendf(nil, `{"input":%d,"op":%d,"name":"echo","attempt":1}`, i, i+1),
			fmt.Appendf(nil, `{"op":%d,"attempt":1,"result":%d}`, i+1, i),
			fmt.Appendf(nil, `{"activation":%d}`, i+1))
	}
	var d evData
	strs := map[string]string{}
	for b.Loop() {
		for _, e := range evs {
			d.clearHot()
			if !decodeHot(e, &d, strs) {
				b.Fatalf("%s: not taken", e)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
