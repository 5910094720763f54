package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// counter is the HTTP server the test tool's steps report to. It counts
// each step execution when its request arrives, before it answers, and
// appends it to a file: the count is the side effect, and it lives outside
// the server's store and process, so a kill cannot undo it.
type counter struct {
	srv *http.Server
	url string

	mu     sync.Mutex // guards counts and file
	counts Effects
	file   *os.File
}

func startCounter(path string) (*counter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &counter{url: "http://" + ln.Addr().String(), counts: Effects{}, file: f}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hit", c.hit)
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

func (c *counter) hit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	run, step := q.Get("run"), q.Get("step")
	if run == "" || step == "" {
		http.Error(w, "run and step are required", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	if c.counts[run] == nil {
		c.counts[run] = map[string]int{}
	}
	c.counts[run][step]++
	fmt.Fprintf(c.file, "%s %s %s attempt=%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), run, step, q.Get("attempt"), q.Get("stepId"))
	err := c.file.Sync()
	c.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// Hold the answer a while: the step has had its effect, and a kill
	// now lands before its result is recorded.
	if ms, _ := strconv.Atoi(q.Get("delayMs")); ms > 0 {
		select {
		case <-time.After(time.Duration(min(ms, 5000)) * time.Millisecond):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(http.StatusOK)
}

// effects returns a copy of the counts.
func (c *counter) effects() Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Effects{}
	for run, steps := range c.counts {
		out[run] = map[string]int{}
		for s, n := range steps {
			out[run][s] = n
		}
	}
	return out
}

func (c *counter) close() {
	c.srv.Close()
	c.mu.Lock()
	c.file.Close()
	c.mu.Unlock()
}
