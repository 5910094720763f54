// Command remind is the reminder tool: report progress, sleep
// durably, and return the note.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o remind.wasm .
package main

import (
	"time"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Note  string `json:"note"`
	Delay string `json:"delay"`
}

type output struct {
	Reminder string `json:"reminder"`
}

func init() {
	sandflow.Name("remind")
	sandflow.Execute(func(ctx *sandflow.Context, in input) (output, error) {
		d, err := time.ParseDuration(in.Delay)
		if err != nil {
			return output{}, sandflow.FatalError("delay: " + err.Error())
		}
		if err := sandflow.Progress(ctx, map[string]string{"status": "preparing reminder"}); err != nil {
			return output{}, err
		}
		if _, err := sandflow.Sleep(ctx, d).Await(ctx); err != nil {
			return output{}, err
		}
		return output{Reminder: in.Note}, nil
	})
}

func main() {}
