package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/console"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

const benchRuns = 100_000

var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

// benchStore writes benchRuns runs (10 tools, three statuses, one
// run_created event each) into a store once per process.
func benchStore(b *testing.B) string {
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "sandflow-console-bench-")
		if benchErr != nil {
			return
		}
		st, err := store.Open(filepath.Join(benchDir, "db"), &store.Options{NoSync: true})
		if err != nil {
			benchErr = err
			return
		}
		defer st.Close()
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		statuses := []store.RunStatus{store.StatusCompleted, store.StatusWaiting, store.StatusFailed}
		for i := range benchRuns {
			at := t0.Add(time.Duration(i) * time.Second)
			r := store.Run{ID: fmt.Sprintf("run_%06d", i), Tool: fmt.Sprintf("tool%d", i%10), Plugin: fmt.Sprintf("tool%d", i%10),
				Version: 1, Status: statuses[i%3], CreatedAt: at, UpdatedAt: at, LastSeq: 1,
				Detail: json.RawMessage(fmt.Sprintf(`{"result":{"n":%d}}`, i))}
			ev := store.Event{Seq: 1, Time: at, Kind: host.EvRunCreated, Data: json.RawMessage(fmt.Sprintf(`{"tool":%q,"input":{"order":"o-%d"}}`, r.Tool, i))}
			if benchErr = st.CreateRun(ctx, r, store.Batch{Events: []store.Event{ev}, Run: &r}); benchErr != nil {
				return
			}
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return filepath.Join(benchDir, "db")
}

func benchConsole(b *testing.B) (*console.Console, *host.Host, *http.Cookie) {
	st, err := store.Open(benchStore(b), &store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	h, err := host.Open(context.Background(), st, nil)
	if err != nil {
		b.Fatal(err)
	}
	c, err := console.New(h, console.Config{APITokens: []string{apiToken}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()); h.Close(context.Background()); st.Close() })
	// The store's run index is built on the first list after opening
	// (BenchmarkStoreOpenAndFirstList100kRuns times that); the pages are timed
	// after it.
	if _, err := h.Runs(context.Background(), store.RunFilter{Limit: 1}); err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {apiToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	cks := rec.Result().Cookies()
	if len(cks) != 1 {
		b.Fatalf("sign-in: %d, %d cookies", rec.Code, len(cks))
	}
	return c, h, cks[0]
}

// firstByte is a ResponseWriter that notes when the first byte is written.
type firstByte struct {
	httptest.ResponseRecorder
	start time.Time
	at    time.Duration
}

func (f *firstByte) Write(b []byte) (int, error) {
	if f.at == 0 {
		f.at = time.Since(f.start)
	}
	return f.ResponseRecorder.Write(b)
}

// benchPage times GET path on a store of 100,000 runs, and reports the
// time to the response's first byte (the console renders a page whole,
// so it is nearly all of it).
func benchPage(b *testing.B, path string) {
	c, _, ck := benchConsole(b)
	var ttfb time.Duration
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.AddCookie(ck)
		w := &firstByte{ResponseRecorder: *httptest.NewRecorder(), start: time.Now()}
		c.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%s: %d", path, w.Code)
		}
		ttfb += w.at
	}
	b.ReportMetric(float64(ttfb.Microseconds())/float64(b.N)/1000, "ms-to-first-byte")
}

// BenchmarkRunsPageStatusToolFilter100kRuns: the first page of waiting
// runs of one tool (3,333 of 100,000 match).
func BenchmarkRunsPageStatusToolFilter100kRuns(b *testing.B) {
	benchPage(b, "/console/runs?status=waiting&tool=tool3")
}

// BenchmarkRunsPageTimeRange100kRuns: a one-hour range in the middle of
// the list, no status or tool.
func BenchmarkRunsPageTimeRange100kRuns(b *testing.B) {
	benchPage(b, "/console/runs?from=2026-01-01T12:00&to=2026-01-01T13:00")
}

// BenchmarkRunsPageTextInResult100kRuns: text found in the run records'
// results (no input read).
func BenchmarkRunsPageTextInResult100kRuns(b *testing.B) {
	benchPage(b, `/console/runs?q=%22n%22%3A9999`)
}

// BenchmarkStoreRunsStatusTool100kRuns: Store.Runs alone for the first
// benchmark's filter: the scan and sort under the page.
func BenchmarkStoreRunsStatusTool100kRuns(b *testing.B) {
	_, h, _ := benchConsole(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.Runs(context.Background(), store.RunFilter{Status: store.StatusWaiting, Tool: "tool3"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreOpenAndFirstList100kRuns: opening a store of 100,000 runs and its
// first list (one run), which builds the run index from every record.
func BenchmarkStoreOpenAndFirstList100kRuns(b *testing.B) {
	path := benchStore(b)
	b.ResetTimer()
	for b.Loop() {
		st, err := store.Open(path, &store.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Runs(context.Background(), store.RunFilter{Limit: 1}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}
