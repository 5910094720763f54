package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// kernel is the host.Observer the metrics install: what the kernel did,
// as it happens. Its methods are on the kernel's paths, so an op's
// observer is looked up once, by kind, when the metrics are made.
type kernel struct {
	activations *prometheus.CounterVec
	actDuration *prometheus.HistogramVec
	replayed    prometheus.Histogram
	ops         [64]prometheus.Observer
	steps       *prometheus.CounterVec
	stepDur     *prometheus.HistogramVec
	limits      *prometheus.CounterVec
	commitDur   prometheus.Histogram
	committed   prometheus.Counter
	opsVec      *prometheus.HistogramVec
}

// Latency buckets: 10 µs to about 10 s, by factors of 2.5.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2.5, 16)

func newKernel() *kernel {
	k := &kernel{
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandflow_activations_total",
			Help: "Activations of runs (a guest ran until it suspended or ended), by tool and by how the instance came by the run's state: fresh (a run's first), parked (the instance left parked), snapshot (restored), replay (the log replayed)."},
			[]string{"tool", "resume"}),
		actDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandflow_activation_duration_seconds", Help: "Time of an activation, the commit that ends it included, by how it resumed.",
			Buckets: latencyBuckets}, []string{"resume"}),
		replayed: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandflow_replay_ops", Help: "Recorded ops an activation answered from the log before its first live op (0 for a parked resume).",
			Buckets: append([]float64{0}, prometheus.ExponentialBuckets(1, 4, 10)...)}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandflow_step_attempts_total", Help: "Step attempts that ended, by tool and outcome (completed or failed)."},
			[]string{"tool", "outcome"}),
		stepDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandflow_step_duration_seconds", Help: "Time of a step attempt, by tool.",
			Buckets: latencyBuckets}, []string{"tool"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandflow_limit_hits_total", Help: "Activations and step attempts a limit stopped, by limit (cpu, memory, payload, events, output, module)."},
			[]string{"limit"}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandflow_store_commit_duration_seconds", Help: "Time the store took to commit a batch of a run's events (durable when it returns).",
			Buckets: latencyBuckets}),
		committed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandflow_store_committed_events_total", Help: "Events the store committed."}),
	}
	opDur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandflow_op_duration_seconds", Help: "Time the host took to perform a live op (one the log did not answer), its commit not included, by op kind.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 3, 14)}, []string{"kind"})
	for i := range k.ops {
		if kind := abi.OpKind(i); kind.Valid() {
			k.ops[i] = opDur.WithLabelValues(kind.String())
		}
	}
	k.opsVec = opDur
	return k
}

func (k *kernel) collectors() []prometheus.Collector {
	return []prometheus.Collector{k.activations, k.actDuration, k.replayed, k.opsVec, k.steps, k.stepDur, k.limits, k.commitDur, k.committed}
}

func (k *kernel) Activation(tool string, resume host.Resume, replayed int, d time.Duration) {
	k.activations.WithLabelValues(tool, string(resume)).Inc()
	k.actDuration.WithLabelValues(string(resume)).Observe(d.Seconds())
	k.replayed.Observe(float64(replayed))
}

func (k *kernel) Step(tool string, d time.Duration, failed bool) {
	outcome := "completed"
	if failed {
		outcome = "failed"
	}
	k.steps.WithLabelValues(tool, outcome).Inc()
	k.stepDur.WithLabelValues(tool).Observe(d.Seconds())
}

func (k *kernel) Op(kind abi.OpKind, d time.Duration) {
	if int(kind) < len(k.ops) && k.ops[kind] != nil {
		k.ops[kind].Observe(d.Seconds())
	}
}

func (k *kernel) Limit(limit string) { k.limits.WithLabelValues(limit).Inc() }

func (k *kernel) Commit(n int, d time.Duration) {
	k.commitDur.Observe(d.Seconds())
	k.committed.Add(float64(n))
}

// jsCollector reads a JavaScript engine's workers at each scrape.
type jsCollector struct{ stats func() jsprogram.Stats }

var descJS = prometheus.NewDesc("sandflow_js_workers", "JavaScript worker processes, by state: busy (running a program or parked with one), idle, long (in the long lane), parked (holding a suspended program).", []string{"state"}, nil)
var descJSRSS = prometheus.NewDesc("sandflow_js_workers_rss_bytes", "Resident memory of the JavaScript worker processes.", nil, nil)

func (jsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descJS; ch <- descJSRSS }

func (c jsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for state, n := range map[string]int{"busy": st.Workers - st.Idle, "idle": st.Idle, "long": st.Long, "parked": st.Parked} {
		ch <- prometheus.MustNewConstMetric(descJS, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(descJSRSS, prometheus.GaugeValue, float64(st.RSSBytes))
}

// WatchJS adds a JavaScript engine's workers to the metrics.
func (m *Metrics) WatchJS(e *jsprogram.Engine) {
	m.reg.MustRegister(jsCollector{e.Stats})
}
