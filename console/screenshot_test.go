package console_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sandflow/sandflow/host"
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// TestScreenshotsOfInboxAndRunPage renders the inbox and a finished run's
// page in Chromium and captures them. With SANDFLOW_SCREENSHOTS=DIR the
// images are written there; the README's are made with
//
//	SANDFLOW_SCREENSHOTS=$PWD/docs go test ./console -run Screenshots
func TestScreenshotsOfInboxAndRunPage(t *testing.T) {
	f := newFixture(t, nil)
	f.Call("approve", `{"service":"billing"}`)
	f.Call("note", `{"topic":"the 2.4 release"}`)
	done := f.Call("approve", `{"service":"search"}`)
	if _, err := f.H.AnswerAsk(context.Background(), askID(t, done), host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	dir := os.Getenv("SANDFLOW_SCREENSHOTS")
	for name, path := range map[string]string{"console-inbox.png": "/console/inbox", "console-run.png": "/console/runs/" + done.ID} {
		run(t, ctx, chromedp.Navigate(f.srv.URL+path), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		png := value(t, ctx, chromedp.FullScreenshot(100))
		if !bytes.HasPrefix(png, pngMagic) || len(png) < 10<<10 {
			t.Fatalf("%s: %d bytes that are not a page's PNG", name, len(png))
		}
		if dir != "" {
			if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
