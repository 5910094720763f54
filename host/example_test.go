package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store/postgres"
)

// exampleTool builds an example guest from source and reads its manifest.
func exampleTool(name string) ([]byte, host.Manifest) {
	root, err := guestbuild.RepoRoot()
	if err != nil {
		panic(err)
	}
	dir := filepath.Join(root, "examples", name)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		panic(err)
	}
	m, err := host.ParseManifest(raw)
	if err != nil {
		panic(err)
	}
	return guestbuild.MustRead(dir), m
}

// Several hosts share one PostgreSQL database: each opens it with
// OpenPostgres, and a run started on one may be answered, resumed and
// completed on any (each host drives a run only while it holds the run's
// lease). Without a server at the URL, OpenPostgres fails with an error
// matching postgres.ErrUnreachable.
func ExampleOpenPostgres() {
	ctx := context.Background()
	h, err := host.OpenPostgres(ctx, "postgres://sandflow@db.example:5432/sandflow", &host.Options{CacheDir: "/var/cache/sandflow"})
	if errors.Is(err, postgres.ErrUnreachable) || errors.Is(err, postgres.ErrBadConnString) {
		fmt.Println("no database:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	defer h.Close(ctx)
	wasm, manifest := exampleTool("deploy")
	if _, err := h.AddPlugin(ctx, wasm, manifest); err != nil {
		panic(err)
	}
	run, err := h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.ID, run.Status)
}

// A host embedded in an application: add a plugin, call its tool, answer
// the question the run waits on, and get the result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sandflow-example-")
	defer os.RemoveAll(dir)

	h, err := host.OpenDir(ctx, dir, nil)
	if err != nil {
		panic(err)
	}
	defer h.Close(ctx)

	wasm, manifest := exampleTool("deploy")
	if _, err := h.AddPlugin(ctx, wasm, manifest); err != nil {
		panic(err)
	}
	run, err := h.Call(ctx, "deploy", json.RawMessage(`{"service":"api"}`), nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, run.Waiting[0].Kind, run.Waiting[0].Prompt[:11])

	run, err = h.AnswerAsk(ctx, run.Waiting[0].AskID, host.Answer{OptionID: "approve"})
	if err != nil {
		panic(err)
	}
	var out struct{ Deployed bool }
	json.Unmarshal(run.Result, &out)
	fmt.Println(run.Status, out.Deployed)
	// Output:
	// waiting ask Deploy api?
	// completed true
}

// A durable sleep: the run waits on a timer, and the scheduler (here one
// round of it) fires it when it is due.
func ExampleHost_FireDue() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sandflow-example-")
	defer os.RemoveAll(dir)
	h, err := host.OpenDir(ctx, dir, nil)
	if err != nil {
		panic(err)
	}
	defer h.Close(ctx)
	wasm, manifest := exampleTool("remind")
	if _, err := h.AddPlugin(ctx, wasm, manifest); err != nil {
		panic(err)
	}
	run, _ := h.Call(ctx, "remind", json.RawMessage(`{"note":"stretch","delay":"10ms"}`), nil)
	fmt.Println(run.Status, run.Waiting[0].Kind, string(run.Progress))

	for run.Status != "completed" {
		h.FireDue(ctx, run.Waiting[0].Until.Add(1), nil)
		run, _ = h.Run(ctx, run.ID)
	}
	fmt.Println(run.Status, string(run.Result))
	// Output:
	// waiting sleep {"status":"preparing reminder"}
	// completed {"reminder":"stretch"}
}
