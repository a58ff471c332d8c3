package computeagent

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/compute-agent/engine"
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
	cur      atomic.Pointer[engine.Epoch] // the running epoch, for the queue gauge
}

// newMetrics registers the series, and more.
func newMetrics(more ...prometheus.Collector) *metrics {
	m := &metrics{
		samples:  metricsrv.Counter("sophon_compute_samples_total", "Samples delivered to the consumer or the trainer ranks (rate() gives samples/s)."),
		bytes:    metricsrv.CounterVec("sophon_compute_bytes_received_total", "Wire bytes received from storage agents, by the split the sample was cut at.", "split"),
		retries:  metricsrv.Counter("sophon_compute_retries_total", "Requests issued again after a stream failure or a storage deadline."),
		epochs:   metricsrv.Counter("sophon_compute_epochs_total", "Epochs completed."),
		failures: metricsrv.Counter("sophon_compute_samples_failed_total", "Bad samples (storage or local errors)."),
		wait:     metricsrv.CounterVec("sophon_compute_trainer_wait_seconds_total", "Time each trainer rank's loop was blocked waiting for a batch (its GPU's idle time).", "rank"),
		batches:  metricsrv.CounterVec("sophon_compute_trainer_batches_total", "Batches handed to each trainer rank.", "rank"),
	}
	m.reg = metricsrv.Registry(append([]prometheus.Collector{m.samples, m.bytes, m.retries, m.epochs, m.failures, m.wait, m.batches,
		metricsrv.GaugeFunc("sophon_compute_queue_depth", "Finished samples waiting in the shared queue for a batch or a trainer slot.", m.queueDepth)}, more...)...)
	return m
}

func (m *metrics) queueDepth() float64 {
	e := m.cur.Load()
	if e == nil {
		return 0
	}
	return float64(e.Queued())
}

var _ engine.Metrics = (*metrics)(nil)

// Failure implements engine.Metrics.
func (m *metrics) Failure() { m.failures.Inc() }

// Retried implements engine.Metrics.
func (m *metrics) Retried(n int) { m.retries.Add(float64(n)) }

// Delivered implements engine.Metrics.
func (m *metrics) Delivered(n int) { m.samples.Add(float64(n)) }

// Received implements engine.Metrics.
func (m *metrics) Received(split, bytes int) {
	label := strconv.Itoa(split)
	if split == ops.SplitCut {
		label = "cut"
	}
	m.bytes.WithLabelValues(label).Add(float64(bytes))
}

// Running implements engine.Metrics.
func (m *metrics) Running(e *engine.Epoch) { m.cur.Store(e) }

// Completed implements engine.Metrics.
func (m *metrics) Completed() { m.epochs.Inc() }

// handler serves GET /metrics and GET /healthz.
func (m *metrics) handler() http.Handler { return metricsrv.Handler(m.reg) }
