// Package metrics serves sandflow's health checks and Prometheus metrics:
// /healthz (the process answers), /readyz (the store answers), and
// /metrics with the runs by status and tool, open questions, the host's
// instance and snapshot counters, and the HTTP requests by route and code,
// which the Middleware counts and logs with slog.
//
// The store's and the host's state is read through package host's public
// API at scrape time; what the kernel does is counted as it happens,
// through the host.Observer New installs.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 10 * time.Second

// Metrics is a registry of sandflow's metrics over one host. It is safe
// for concurrent use.
type Metrics struct {
	h        *host.Host
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	log      *slog.Logger
}

// New makes the metrics of h, and installs their observer in h
// (host.SetObserver, replacing any observer h had), which counts and
// times the kernel's activations,
// live ops, step attempts, limit hits and store commits from then on.
// logger receives one line per request (nil: no request log).
func New(h *host.Host, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{h: h, reg: prometheus.NewRegistry(), log: logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandflow_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code."},
			[]string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandflow_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern (a stream's whole life).",
			Buckets: prometheus.DefBuckets}, []string{"route"}),
	}
	m.reg.MustRegister(m.requests, m.duration, hostCollector{h},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	k := newKernel()
	m.reg.MustRegister(k.collectors()...)
	h.SetObserver(k)
	return m
}

// Handler serves /metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError, MaxRequestsInFlight: 4, Timeout: scrapeTimeout})
}

// Registry is the registry the metrics are in, for an embedder's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Middleware counts, times and logs each request next answers. The route
// label is the pattern the request matched in next's http.ServeMux (set
// on the request by the mux), so its values are bounded by the routes;
// a request no pattern matched counts as "unmatched".
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &recorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		d := time.Since(start)
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(rw.code)).Inc()
		m.duration.WithLabelValues(route).Observe(d.Seconds())
		m.log.Info("http", "method", r.Method, "path", r.URL.Path, "route", route, "code", rw.code,
			"bytes", rw.bytes, "duration", d, "remote", r.RemoteAddr)
	})
}

// recorder keeps a response's status code and size; it unwraps for
// http.ResponseController, so streams can still flush.
type recorder struct {
	http.ResponseWriter
	code    int
	bytes   int64
	written bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.written {
		r.code, r.written = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.written = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Healthz answers 200 while the process serves requests.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// Ready answers /readyz: 200 when the store answers a read, 503 with the
// reason when it does not (closed, damaged, unreachable).
func Ready(h *host.Host) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// A lookup of an id no run has reads the run index.
		if _, err := h.Store().Run(ctx, "readyz-probe"); err != nil && !errors.Is(err, store.ErrRunNotFound) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	}
}

// runCounts counts the runs by status and tool: from the store's own
// counts where it keeps them (store.RunCounter), else from every record.
func runCounts(ctx context.Context, h *host.Host) ([]store.RunCount, error) {
	if rc, ok := h.Store().(store.RunCounter); ok {
		return rc.RunCounts(ctx)
	}
	runs, err := h.Runs(ctx, store.RunFilter{})
	if err != nil {
		return nil, err
	}
	type key struct {
		status store.RunStatus
		tool   string
	}
	n := map[key]int{}
	for _, r := range runs {
		n[key{r.Status, r.Tool}]++
	}
	out := make([]store.RunCount, 0, len(n))
	for k, v := range n {
		out = append(out, store.RunCount{Status: k.status, Tool: k.tool, N: v})
	}
	return out, nil
}

// hostCollector reads the host's state at each scrape.
type hostCollector struct{ h *host.Host }

var (
	descRuns      = prometheus.NewDesc("sandflow_runs", "Runs in the store, by status and tool.", []string{"status", "tool"}, nil)
	descQuestions = prometheus.NewDesc("sandflow_questions_open", "Questions waiting for an answer.", nil, nil)
	descParked    = prometheus.NewDesc("sandflow_parked_instances", "Suspended WebAssembly instances kept in memory.", nil, nil)
	descParkedB   = prometheus.NewDesc("sandflow_parked_bytes", "Memory of the parked instances.", nil, nil)
	descInst      = prometheus.NewDesc("sandflow_instances_total", "WebAssembly workflow instances the host came by since it opened, by how: made (instantiated and initialised) or reused.", []string{"how"}, nil)
	descSnap      = prometheus.NewDesc("sandflow_snapshots_total", "What the host did with instance snapshots and state images since it opened.", []string{"event"}, nil)
	descScrapeErr = prometheus.NewDesc("sandflow_scrape_error", "1 when reading the store for this scrape failed.", nil, nil)
	descJournal   = prometheus.NewDesc("sandflow_store_journal_bytes", "Size of the embedded store's write journal: writes not yet folded into the main file by a checkpoint.", nil, nil)
)

func (hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descQuestions, descParked, descParkedB, descInst, descSnap, descScrapeErr, descJournal} {
		ch <- d
	}
}

func (c hostCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	failed := 0.0
	if counts, err := runCounts(ctx, c.h); err != nil {
		failed = 1
	} else {
		for _, rc := range counts {
			ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(rc.N), string(rc.Status), rc.Tool)
		}
	}
	if qs, err := c.h.Questions(ctx, true); err != nil {
		failed = 1
	} else {
		ch <- prometheus.MustNewConstMetric(descQuestions, prometheus.GaugeValue, float64(len(qs)))
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, failed)
	n, b := c.h.Parked()
	ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(descParkedB, prometheus.GaugeValue, float64(b))
	is := c.h.InstanceStats()
	ch <- prometheus.MustNewConstMetric(descInst, prometheus.CounterValue, float64(is.Made), "made")
	ch <- prometheus.MustNewConstMetric(descInst, prometheus.CounterValue, float64(is.Reused), "reused")
	if j, ok := c.h.Store().(interface{ JournalBytes() int64 }); ok {
		ch <- prometheus.MustNewConstMetric(descJournal, prometheus.GaugeValue, float64(j.JournalBytes()))
	}
	ss := c.h.SnapshotStats()
	for ev, v := range map[string]int64{"taken": ss.Taken, "restored": ss.Restored, "refused": ss.Refused,
		"image_loaded": ss.Images, "image_refused": ss.ImagesRefused, "image_completed": ss.Completed} {
		ch <- prometheus.MustNewConstMetric(descSnap, prometheus.CounterValue, float64(v), ev)
	}
}
