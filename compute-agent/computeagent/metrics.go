package computeagent

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sophon-dl/sophon/compute-agent/fetch"
	"github.com/sophon-dl/sophon/internal/metricsrv"
	"github.com/sophon-dl/sophon/ops"
)

// metrics are the agent's Prometheus series, in a private registry so that
// several agents can run in one process.
type metrics struct {
	reg      *prometheus.Registry
	samples  prometheus.Counter
	bytes    *prometheus.CounterVec
	retries  prometheus.Counter
	epochs   prometheus.Counter
	failures prometheus.Counter
	wait     *prometheus.CounterVec
	batches  *prometheus.CounterVec
	cur      atomic.Pointer[fetch.Epoch] // the running epoch, for the queue gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sophon_compute_samples_total",
			Help: "Samples delivered to the consumer or the trainer ranks (rate() gives samples/s).",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sophon_compute_bytes_received_total",
			Help: "Wire bytes received from storage agents, by the split the sample was cut at.",
		}, []string{"split"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sophon_compute_retries_total",
			Help: "Requests issued again after a stream failure or a storage deadline.",
		}),
		epochs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sophon_compute_epochs_total",
			Help: "Epochs completed.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sophon_compute_samples_failed_total",
			Help: "Bad samples (storage or local errors).",
		}),
		wait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sophon_compute_trainer_wait_seconds_total",
			Help: "Time each trainer rank's loop was blocked waiting for a batch (its GPU's idle time).",
		}, []string{"rank"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sophon_compute_trainer_batches_total",
			Help: "Batches handed to each trainer rank.",
		}, []string{"rank"}),
	}
	m.reg.MustRegister(m.samples, m.bytes, m.retries, m.epochs, m.failures, m.wait, m.batches,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sophon_compute_queue_depth",
			Help: "Finished samples waiting in the shared queue for a batch or a trainer slot.",
		}, m.queueDepth),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) queueDepth() float64 {
	e := m.cur.Load()
	if e == nil {
		return 0
	}
	return float64(e.Queued())
}

var _ fetch.Metrics = (*metrics)(nil)

// Failure implements fetch.Metrics.
func (m *metrics) Failure() { m.failures.Inc() }

// Retried implements fetch.Metrics.
func (m *metrics) Retried(n int) { m.retries.Add(float64(n)) }

// Delivered implements fetch.Metrics.
func (m *metrics) Delivered(n int) { m.samples.Add(float64(n)) }

// Received implements fetch.Metrics.
func (m *metrics) Received(split, bytes int) {
	label := strconv.Itoa(split)
	if split == ops.SplitCut {
		label = "cut"
	}
	m.bytes.WithLabelValues(label).Add(float64(bytes))
}

// handler serves GET /metrics and GET /healthz.
func (m *metrics) handler() http.Handler { return metricsrv.Handler(m.reg) }
