package storageagent

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/internal/metricsrv"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// metrics are the agent's Prometheus series, kept in a private registry so
// that several agents can run in one process (tests, the testbed).
type metrics struct {
	reg       *prometheus.Registry
	bytesSent prometheus.Counter
	samples   *prometheus.CounterVec
	cpu       prometheus.Counter
	errors    *prometheus.CounterVec
	streams   prometheus.Gauge
	rejected  *prometheus.CounterVec
	stalled   prometheus.Gauge
	served    *prometheus.CounterVec
	// Placement: the layout's shards, those held, those whose files are
	// missing here (with a manifest), and the members the held set was
	// computed over.
	shards, held, missing, placeMembers prometheus.Gauge
}

// newMetrics registers the series, and more. queueDepth and buffered are
// read at scrape time.
func newMetrics(queueDepth, buffered func() float64, more ...prometheus.Collector) *metrics {
	m := &metrics{
		bytesSent:    metricsrv.Counter("sophon_storage_bytes_sent_total", "Bytes of sample data (wire forms) sent on Fetch streams."),
		samples:      metricsrv.CounterVec("sophon_storage_samples_total", "Samples sent, by the split they were cut at (ops[0:split] ran here).", "split"),
		cpu:          metricsrv.Counter("sophon_storage_cpu_seconds_total", "Thread CPU seconds spent reading samples, running ops and encoding."),
		errors:       metricsrv.CounterVec("sophon_storage_errors_total", "Per-sample errors returned, by kind.", "kind"),
		streams:      metricsrv.Gauge("sophon_storage_streams_in_flight", "Open Fetch streams."),
		rejected:     metricsrv.CounterVec("sophon_storage_streams_rejected_total", "Fetch streams refused at the agent's or a peer's stream limit, by limit.", "limit"),
		stalled:      metricsrv.Gauge("sophon_storage_workers_stalled", "1 while every worker of a pool is stuck on one job past the stall timeout (health NOT_SERVING)."),
		served:       metricsrv.CounterVec("sophon_storage_served_raw_total", "Offload requests answered with the raw bytes instead, by reason: contended (the CPU budget could not keep up with the link; work-conserving offload) or uncuttable (the JPEG cannot be cut exactly).", "reason"),
		shards:       metricsrv.Gauge("sophon_storage_shards", "Shards in the dataset's layout (tar files, or --shard-size id ranges)."),
		held:         metricsrv.Gauge("sophon_storage_held_shards", "Shards this agent holds: those whose rendezvous-hashed --replicas owners among the live storage agents of its placement group include it."),
		missing:      metricsrv.Gauge("sophon_storage_missing_shards", "Shards of the layout with a file this agent does not have (it serves part of the dataset from --manifest); it never holds them."),
		placeMembers: metricsrv.Gauge("sophon_storage_placement_members", "Live storage agents, this one included, that the held shards were computed over (same dataset fingerprint, layout and replicas)."),
	}
	m.reg = metricsrv.Registry(append([]prometheus.Collector{m.bytesSent, m.samples, m.cpu, m.errors, m.streams, m.rejected, m.stalled, m.served, m.shards, m.held, m.missing, m.placeMembers,
		metricsrv.GaugeFunc("sophon_storage_buffered_bytes", "Bytes of results waiting to be sent, all streams.", buffered),
		metricsrv.GaugeFunc("sophon_storage_queue_depth", "Fetch requests waiting for a worker.", queueDepth)}, more...)...)
	return m
}

func (m *metrics) sent(split string, bytes int) {
	m.bytesSent.Add(float64(bytes))
	m.samples.WithLabelValues(split).Inc()
}

// splitLabel is the samples metric's label of the form a response carries:
// the split number, "cut" for the JPEG-domain crop, "0" for a raw answer to
// an offload request.
func splitLabel(req *dataplanepb.FetchRequest, served dataplanepb.Served) string {
	switch {
	case served != dataplanepb.Served_SERVED_AS_REQUESTED:
		return "0"
	case req.GetCut():
		return "cut"
	}
	return strconv.FormatUint(uint64(req.GetSplit()), 10)
}

func (m *metrics) failed(kind dataplanepb.ErrorKind) {
	m.errors.WithLabelValues(kindLabel(kind)).Inc()
}

// kindLabel is the error kind's name without its prefix, lower case:
// ERROR_KIND_NOT_JPEG -> "not_jpeg".
func kindLabel(kind dataplanepb.ErrorKind) string {
	return strings.ToLower(strings.TrimPrefix(kind.String(), "ERROR_KIND_"))
}

// handler serves GET /metrics and GET /healthz.
func (m *metrics) handler() http.Handler { return metricsrv.Handler(m.reg) }
