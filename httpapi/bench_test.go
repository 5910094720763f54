package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/jsprogram"
)

// backgroundLoad attaches a load to a server at addr and returns the
// function that detaches it. Benchmarks of call latency run once per load
// in loads; another load (endless JavaScript loops, say) is one more
// entry.
type backgroundLoad func(tb testing.TB, addr string) (stop func())

var loads = []struct {
	name string
	load backgroundLoad
}{
	{"alone", func(testing.TB, string) func() { return func() {} }},
	{"with-300-slow-clients", slowClients(150, 150)},
	{"with-300-slow-clients-and-6-js-loops", both(slowClients(150, 150), jsLoops(6))},
}

// both attaches two loads.
func both(a, b backgroundLoad) backgroundLoad {
	return func(tb testing.TB, addr string) func() {
		stopA := a(tb, addr)
		stopB := b(tb, addr)
		return func() { stopB(); stopA() }
	}
}

// jsLoops keeps n calls of the workflow tool in flight whose programs
// loop forever: each runs until its JavaScript time limit fails it, and is
// then called again.
func jsLoops(n int) backgroundLoad {
	return func(tb testing.TB, addr string) func() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		client := &http.Client{}
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/tools/workflow/calls?wait=2m", strings.NewReader(`{"js":"for (;;) {}"}`))
					req.Header.Set("Authorization", "Bearer "+apiToken)
					resp, err := client.Do(req)
					if err != nil {
						return // detached, or the server is closing
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		time.Sleep(500 * time.Millisecond) // the loops have started
		// Detaching stops calling; the loops running end with the host.
		return func() { cancel(); wg.Wait(); client.CloseIdleConnections() }
	}
}

// slowClients attaches trickle connections that send a call's body a byte
// a second, and idle ones that made one request and hold their keep-alive
// connection.
func slowClients(trickle, idle int) backgroundLoad {
	return func(tb testing.TB, addr string) func() {
		var mu sync.Mutex
		var conns []net.Conn
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i := range trickle + idle {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				tb.Fatal(err)
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if i < trickle {
				io.WriteString(c, "POST /v1/tools/kitchen/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+apiToken+"\r\nContent-Length: 100000\r\n\r\n")
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := time.NewTicker(time.Second)
					defer t.Stop()
					for {
						select {
						case <-done:
							return
						case <-t.C:
							c.Write([]byte("{"))
						}
					}
				}()
			} else {
				io.WriteString(c, "GET /v1/tools HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+apiToken+"\r\n\r\n")
				wg.Add(1)
				go func() { defer wg.Done(); io.Copy(io.Discard, c) }() // reads its answer, then holds
			}
		}
		return func() {
			close(done)
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		}
	}
}

// BenchmarkCallLatency times one call of a wasm tool that completes in
// one activation (kitchen, mode steps, n 0), over HTTP through
// NewHTTPServer with its default bounds, one call at a time, under each
// background load; it reports the 50th and 99th percentile of the
// calls' latencies.
func BenchmarkCallLatency(b *testing.B) {
	for _, l := range loads {
		b.Run(l.name, func(b *testing.B) {
			addr, stop := benchServer(b)
			defer stop()
			detach := l.load(b, addr)
			defer detach()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			call := func() {
				req, _ := http.NewRequest("POST", "http://"+addr+"/v1/tools/kitchen/calls?wait=30s", strings.NewReader(`{"mode":"steps","n":0}`))
				req.Header.Set("Authorization", "Bearer "+apiToken)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("call: %d", resp.StatusCode)
				}
			}
			for range 5 {
				call() // warm: compiled, instances made, connection open
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				call()
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
		})
	}
}

// benchServer serves a host with the kitchen tool and the workflow tool
// (JavaScript with its default workers) through NewHTTPServer, with the
// default bounds.
func benchServer(b *testing.B) (string, func()) {
	b.Helper()
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { js.Close(context.Background()) })
	e := newEnv(b, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}}, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if r := e.upload(adminToken, guestWasm(b, "host/testdata/guests/kitchen"), repoFile(b, "host/testdata/guests/kitchen/manifest.json")); r.status != http.StatusCreated {
		b.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/workflow-tool", adminToken, strings.NewReader(`{}`), "application/json"); r.status != http.StatusCreated {
		b.Fatalf("enabling the workflow tool: %d %s", r.status, r.body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := httpapi.NewHTTPServer(e.api)
	go srv.Serve(httpapi.LimitListener(ln, httpapi.DefaultMaxConns))
	return ln.Addr().String(), func() { srv.Close() }
}
