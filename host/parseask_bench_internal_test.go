package host

import (
	"encoding/json"
	"testing"

	"github.com/sandflow/sandflow/abi"
)

// BenchmarkParseAsk times parseAsk: reading and checking an ask op's payload.
func BenchmarkParseAsk(b *testing.B) {
	payload, err := json.Marshal(abi.AskRequest{Prompt: "Go on?", Options: []abi.AskOption{{ID: "ok", Label: "OK"}}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, msg := parseAsk(payload); msg != "" {
			b.Fatal(msg)
		}
	}
}
