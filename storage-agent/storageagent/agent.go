// Package storageagent is the storage agent: it serves a dataset over the
// data plane's Storage service (proto/dataplanepb), runs the prefix
// ops[0:split] of each requested sample's pipeline within a CPU budget, and
// announces itself to the cluster through memberlist.
//
// How the CPU budget is shared among the requests of the agent's clients
// (the workers' count and throttle, fair queueing, work-conserving
// admission) is package budget; this package runs the workers on it.
//
// The storage-agent binary is a thin main over this package; tests and the
// testbed start agents in process with [New] and [Agent.Serve] on any
// listener (bufconn included).
package storageagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"

	"github.com/sophon-dl/sophon/internal/grpcbuf"
	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/storage-agent/budget"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

// MaxMessageBytes bounds a gRPC message either way: room for a 224x224x3
// float32 tensor (600 KB), a decoded 4000x3000 image (36 MB) or a large raw
// JPEG. A client must accept messages this large
// (grpc.MaxCallRecvMsgSize). A response that would exceed it is a
// TOO_LARGE sample error instead.
const MaxMessageBytes = 64 << 20

// MaxRequestBytes bounds a request message the agent receives: a fetch
// request with a pipeline spec is well under it.
const MaxRequestBytes = 64 << 10

// MaxSpecBytes bounds a pipeline spec a client sends (when the operator
// allows client specs).
const MaxSpecBytes = 16 << 10

// Stream limits: Fetch streams open at once in all, per peer (its
// certificate identity, or its IP address without TLS), and per HTTP/2
// connection. Past the first two a new stream fails with
// RESOURCE_EXHAUSTED; a compute agent opens one per connection it stripes
// its fetches over (compute-agent --conns, at most 8), and its
// connections are one peer here.
const (
	DefaultMaxStreams        = 256
	DefaultMaxStreamsPerPeer = 16
	maxStreamsPerConn        = 64
)

// DefaultStallTimeout is how long every worker of a pool may be stuck on
// one job before health says NOT_SERVING.
const DefaultStallTimeout = 30 * time.Second

// DefaultOpTimeout is the deadline of one sample's ops on the agent.
const DefaultOpTimeout = oplimits.DefaultOpTimeout

// DefaultListen is the gRPC address when Config.Listen is empty: every
// interface, for an agent that authenticates its peers.
const DefaultListen = ":7070"

// InsecureListen is the gRPC address when Config.Listen is empty and
// Config.Insecure is set: loopback only, so that an agent without
// authentication serves no one who can merely route to the host.
const InsecureListen = "127.0.0.1:7070"

// DefaultQueue is the least Config.Queue defaults to.
const DefaultQueue = 128

// Keepalive enforcement: clients may ping at most every MinPingInterval
// (with or without streams open); a client pinging faster is disconnected.
const (
	MinPingInterval   = 10 * time.Second
	keepaliveTime     = 30 * time.Second
	keepaliveTimeout  = 10 * time.Second
	metricsStopWithin = time.Second
)

// Errors of the agent's lifecycle.
var (
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("storageagent: bad config")
	// ErrAgentClosed: the agent was closed.
	ErrAgentClosed = errors.New("storageagent: agent closed")
	// ErrServing: Serve was called while the agent was already serving.
	ErrServing = errors.New("storageagent: already serving")
)

// Config configures an [Agent]. Zero fields take the defaults noted.
type Config struct {
	// Data is the dataset directory (ImageFolder or tar shards; see
	// [dataset.Dataset]), or an object store's s3://BUCKET/PREFIX holding
	// either layout as keys (see package s3src). Required.
	Data string
	// S3 configures the object store when Data is an s3:// URL; its zero
	// value follows the AWS environment (see s3src.Config).
	S3 s3src.Config
	// Strict refuses to start on any bad entry in Data (see
	// dataset.OpenOptions.Strict). False skips, logs and counts them.
	Strict bool
	// VerifyEveryRead hashes every read of a loose file against the index
	// (dataset.OpenOptions.VerifyEveryRead); false hashes it at its first
	// read and after any change.
	VerifyEveryRead bool
	// Index is the content-hash index file (see
	// dataset.OpenOptions.Index). Empty means <Data>/.sophon-index when
	// writable, else one in the user's cache directory; "-" means none.
	Index string
	// Listen is the gRPC address for [Agent.Run]. Empty means
	// DefaultListen, or InsecureListen (loopback) with Insecure.
	Listen string
	// Advertise is the gRPC host:port announced to peers. Empty means the
	// listener's address, with a wildcard host replaced by the gossip
	// advertise or bind host when specific, else by the machine's hostname.
	Advertise string
	// Gossip is where the agent gossips, whom it joins and the gossip key
	// (membership.Gossip). An empty Gossip.Bind means no membership: the
	// agent serves gRPC only, and Gossip.Join must be empty too. With
	// Gossip.Bind set, a key (Gossip.Key or Gossip.KeyFile) is required
	// unless Insecure. The label is Cluster.
	Gossip membership.Gossip
	// Cluster is the cluster's name, held here once for both its uses: the
	// gossip label, and the cluster every peer's certificate (and this
	// agent's own) must name. Empty means tlsconf.DefaultCluster.
	Cluster string
	// Name is the node's name in the cluster and in Info. Empty means the
	// hostname.
	Name string
	// CPUs is the CPU budget for running ops, fractions allowed: the pool has
	// ceil(CPUs) workers, throttled to CPUs cores in all (see package
	// budget). Zero
	// means runtime.NumCPU().
	CPUs float64
	// Queue bounds the requests one stream may have in the agent at once:
	// queued, running or waiting to be sent. Zero means DefaultQueue or 4
	// per worker, whichever is more. A full window stops the stream's
	// receive loop, so raw fetches behind offloaded ones wait too: the
	// default holds a compute agent's whole window
	// (computeagent.DefaultWindow, 64) twice over, so that a window full of
	// offloaded requests never keeps the link idle.
	Queue int
	// Pipelines are the pipelines the agent runs for any client: preset
	// names or spec files (YAML or JSON). Empty means every preset.
	Pipelines []string
	// AllowClientSpecs lets clients send pipeline specs of their own
	// (bounded by MaxSpecBytes and, like every pipeline, by the server's
	// decode and op limits). Off by default: only Pipelines run.
	AllowClientSpecs bool
	// MaxStreams and MaxStreamsPerPeer bound the open Fetch streams, in all
	// and per peer. Zero means DefaultMaxStreams, DefaultMaxStreamsPerPeer.
	MaxStreams, MaxStreamsPerPeer int
	// JobWeights are the operator's weights of the jobs the agent serves,
	// by the name their compute agents send (dataplanepb.JobMetadata); a
	// job not named weighs 1. Each active job's share of CPUs is its
	// weight over the active jobs' (InfoResponse.share_cpus), and the fair
	// queue serves the jobs in that proportion (package budget, Jobs).
	JobWeights map[string]float64
	// JobWindow is how long a job without an open Fetch stream stays
	// active after its last stream or Info. Zero means
	// budget.DefaultJobWindow.
	JobWindow time.Duration
	// MaxJobs bounds the active jobs: a stream of a new job beyond it is
	// refused (ResourceExhausted). Zero means budget.DefaultMaxJobs.
	MaxJobs int
	// NoJobShares tells every job the whole budget in Info (share_cpus =
	// cpus), as before shares: each job plans as if the budget were its
	// own. The fair queue still weighs the jobs.
	NoJobShares bool
	// Limits bound every pipeline run on the agent's data: decoded pixels,
	// progressive scans, libjpeg's memory and every op's output, checked
	// before allocating. A client's spec can lower the pixel cap, never
	// raise it. Zero fields take ops.DefaultLimits' values.
	Limits ops.Limits
	// OpTimeout is the deadline of one sample's ops, checked between ops
	// and inside the JPEG decoder; past it the sample fails with
	// ERROR_KIND_DEADLINE. Zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// StallTimeout is how long every worker of a pool may be stuck on one
	// job before health says NOT_SERVING. Zero means DefaultStallTimeout.
	StallTimeout time.Duration
	// IdleRelease is how long the agent must have run no job before it
	// returns the memory a burst left behind to the operating system (a
	// forced collection, see idle.go). Zero means DefaultIdleRelease;
	// negative never.
	IdleRelease time.Duration
	// RequestTimeout is how long a request may wait in the queue; past it
	// the request fails with ERROR_KIND_DEADLINE. Zero means 30 s.
	RequestTimeout time.Duration
	// ShutdownGrace is how long open streams may finish after shutdown
	// begins before they are cut. Zero means 5 s.
	ShutdownGrace time.Duration
	// TLS names the certificate, key and CA for mutual TLS 1.3 on the gRPC
	// server: the certificate must name this storage agent of Cluster
	// (tlsconf.Identity), and clients must present a certificate signed by
	// the CA naming a compute agent of Cluster. All empty means no TLS,
	// which is refused unless Insecure.
	TLS tlsconf.Files
	// Insecure is the one switch (--insecure) for both of the agent's
	// protections, held here because it spans Gossip and TLS: without it
	// the agent refuses to start without TLS files or, with Gossip.Bind
	// set, without a gossip key. With it the agent serves plaintext gRPC
	// when TLS is empty and gossips unencrypted when no key is given, to
	// anyone who can reach the ports, and logs a warning when serving
	// starts. False requires both. For tests and a first try-out only.
	Insecure bool
	// MetricsAddr is the HTTP address of /metrics and /healthz. Empty means
	// no metrics listener.
	MetricsAddr string
	// Replicas is how many storage agents hold each shard of the dataset:
	// the Replicas ranked highest by rendezvous hashing among the live
	// storage agents of the same fingerprint, layout and replica count
	// (see internal/placement). Zero, or at least the number of such
	// agents, means every agent holds every shard; DefaultConfig sets
	// placement.DefaultReplicas. At most placement.MaxReplicas. Holding is
	// announced, not enforced: the agent serves every sample it has.
	Replicas int
	// ShardSize is the samples per shard of a folder of images, the last
	// shard shorter; a dataset of tar files is sharded by its files. Zero
	// means placement.DefaultShardSize. The layout may have at most
	// placement.MaxShards shards.
	ShardSize int
	// Manifest is the path of the whole dataset's manifest (see
	// [dataset.Manifest]; "storage-agent manifest" writes one) when Data
	// holds only part of its files: the agent serves the catalog of the
	// manifest, and its fingerprint, from the files it has, and never
	// holds a shard it lacks a file of. Empty: Data is the whole dataset.
	Manifest string
	// Egress is the agent's egress rate in bytes per second, announced in
	// Info and gossip for planners. Zero means unknown.
	Egress uint64
	// SendBuffer is the kernel send buffer in bytes of every connection
	// the agent accepts (see DefaultSendBuffer for why it matters under a
	// CPU limit), at most MaxSendBuffer. Zero leaves the kernel's
	// autotuning; DefaultConfig sets DefaultSendBuffer.
	SendBuffer int
	// TCPCongestion is the congestion control (TCP_CONGESTION) of every
	// connection the agent accepts; New refuses one the kernel lacks.
	// Empty keeps the host's default (tcpinfo.FlagUsage says why).
	TCPCongestion string
	// Version is reported in Info and announced to peers. Empty means "dev".
	Version string
	// Logger receives the agent's log. The zero value writes nothing.
	Logger zerolog.Logger
}

// DefaultConfig returns a Config with every default spelled out; the
// caller sets Data, and TLS (or Insecure). [New] validates it and fills
// in what is left zero.
func DefaultConfig() Config {
	return Config{
		Cluster:        tlsconf.DefaultCluster,
		CPUs:           float64(runtime.NumCPU()),
		RequestTimeout: 30 * time.Second,
		ShutdownGrace:  5 * time.Second,
		Replicas:       placement.DefaultReplicas,
		ShardSize:      placement.DefaultShardSize,
		SendBuffer:     DefaultSendBuffer,
		Version:        "dev",
		Logger:         zerolog.Nop(),
	}
}

// Knobs are the agent's test hooks, apart from its Config (as CockroachDB
// keeps its TestingKnobs): only tests set them, through [NewWithKnobs].
// The zero Knobs are production's.
type Knobs struct {
	// GossipTransport replaces memberlist's network transport (tests pass
	// one from memberlist.MockNetwork); Config.Gossip.Bind must still be
	// set for the agent to gossip, but is not bound. Nil means UDP/TCP on
	// Config.Gossip.Bind.
	GossipTransport memberlist.Transport
	// GossipTune adjusts memberlist's timing (tests pass
	// membership.FastTiming). Nil keeps the LAN preset.
	GossipTune func(*memberlist.Config)
	// PeerLog sets the burst, interval and clock of the rate limit on the
	// warnings peers cause (tests pass a clock of their own). The zero
	// value is peerlog's defaults.
	PeerLog peerlog.Options
	// BufferPool replaces the gRPC server's buffer pool, grpcbuf.Pool
	// (BenchmarkFetchPool passes gRPC's default tiers to compare).
	BufferPool mem.BufferPool
}

// withDefaults validates c and returns it with its zero fields filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.Cluster == "" {
		c.Cluster = tlsconf.DefaultCluster
	}
	g := c.Gossip
	if g.Bind != "" || g.Key != "" || g.KeyFile != "" {
		if err := g.Check(c.Insecure); err != nil {
			return c, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	c.fillDefaults()
	c.fillIdentity()
	return c, nil
}

// validate checks the fields that have no default to fall back on: the
// dataset, ranges, the gossip and TLS settings.
func (c *Config) validate() error {
	if c.Data == "" {
		return fmt.Errorf("%w: no dataset directory (Data)", ErrConfig)
	}
	if math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) || c.CPUs < 0 {
		return fmt.Errorf("%w: cpus %v", ErrConfig, c.CPUs)
	}
	if c.Queue < 0 || c.MaxStreams < 0 || c.MaxStreamsPerPeer < 0 || c.StallTimeout < 0 || c.OpTimeout < 0 || c.JobWindow < 0 || c.MaxJobs < 0 {
		return fmt.Errorf("%w: negative queue, stream limit or timeout", ErrConfig)
	}
	if c.Limits.MaxPixels < 0 || c.Limits.MaxScans < 0 || c.Limits.MaxMemory < 0 || c.Limits.MaxOutputBytes < 0 {
		return fmt.Errorf("%w: negative decode or op limit", ErrConfig)
	}
	if c.RequestTimeout < 0 || c.ShutdownGrace < 0 {
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	if c.Replicas < 0 || c.Replicas > placement.MaxReplicas {
		return fmt.Errorf("%w: replicas %d, want 0 (every agent holds every shard) to %d", ErrConfig, c.Replicas, placement.MaxReplicas)
	}
	if c.ShardSize < 0 {
		return fmt.Errorf("%w: shard size %d", ErrConfig, c.ShardSize)
	}
	if c.SendBuffer < 0 || c.SendBuffer > MaxSendBuffer {
		return fmt.Errorf("%w: send buffer %d bytes, want 0 (the kernel's autotuning) to %d", ErrConfig, c.SendBuffer, MaxSendBuffer)
	}
	if err := tcpinfo.Check(c.TCPCongestion); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Gossip.Bind == "" && len(c.Gossip.Join) > 0 {
		return fmt.Errorf("%w: join needs a gossip address", ErrConfig)
	}
	if c.Advertise != "" {
		if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
			return fmt.Errorf("%w: advertise %q: %v", ErrConfig, c.Advertise, err)
		}
	}
	if err := c.TLS.Validate(); err != nil {
		return fmt.Errorf("%w: tls: %w", ErrConfig, err)
	}
	if !c.TLS.Enabled() && !c.Insecure {
		return fmt.Errorf("%w: no TLS certificate: pass --tls-cert, --tls-key and --tls-ca "+
			"(make certs, or storage-agent certs --out DIR, makes a development CA and certificates), or --insecure", ErrConfig)
	}
	return nil
}

// fillDefaults fills in the zero sizes, counts, limits and timeouts.
func (c *Config) fillDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
		if c.Insecure {
			c.Listen = InsecureListen
		}
	}
	if c.CPUs == 0 {
		c.CPUs = float64(runtime.NumCPU())
	}
	workers, _ := budget.Size(c.CPUs)
	if c.Queue == 0 {
		c.Queue = max(DefaultQueue, 4*workers)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxStreamsPerPeer == 0 {
		c.MaxStreamsPerPeer = DefaultMaxStreamsPerPeer
	}
	if c.IdleRelease == 0 {
		c.IdleRelease = DefaultIdleRelease
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	def := ops.DefaultLimits()
	c.Limits.MaxPixels = cmp.Or(c.Limits.MaxPixels, def.MaxPixels)
	c.Limits.MaxScans = cmp.Or(c.Limits.MaxScans, def.MaxScans)
	c.Limits.MaxMemory = cmp.Or(c.Limits.MaxMemory, def.MaxMemory)
	c.Limits.MaxOutputBytes = cmp.Or(c.Limits.MaxOutputBytes, def.MaxOutputBytes)
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.ShardSize == 0 {
		c.ShardSize = placement.DefaultShardSize
	}
}

// fillIdentity fills in the node's name (from the TLS certificate, else the
// host name) and the version.
func (c *Config) fillIdentity() {
	if c.Name == "" && c.TLS.Enabled() {
		// The certificate names the node; compute agents check that the
		// name gossip announces is the one in the certificate.
		if id, err := c.TLS.Identity(); err == nil {
			c.Name = id.Name
		}
	}
	if c.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "storage"
		}
		c.Name = host
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Agent is a storage agent. Create it with [New], serve with [Agent.Run] or
// [Agent.Serve], release it with [Agent.Close].
type Agent struct {
	cfg     Config
	knobs   Knobs
	ds      *dataset.Dataset
	srv     *server
	workers int
	gopts   []grpc.ServerOption
	// peer rate-limits and counts the warnings remote peers cause (TLS,
	// stream limits, bad requests, gossip, the metrics listener).
	peer *peerlog.Limiter

	mu          sync.Mutex
	closed      bool
	serving     bool
	stop        context.CancelFunc // ends a running Serve
	done        chan struct{}      // closed when that Serve returns
	addr        net.Addr
	metricsAddr net.Addr
	node        *membership.Node // while serving with membership
}

// New validates cfg, filling in its zero fields, and opens the dataset.
func New(cfg Config) (*Agent, error) { return Open(context.Background(), cfg, Knobs{}) }

// NewWithKnobs is [New] with test hooks.
func NewWithKnobs(cfg Config, k Knobs) (*Agent, error) { return Open(context.Background(), cfg, k) }

// Open is [NewWithKnobs] that stops opening the dataset (an object
// store's listing, the hashing) when ctx ends: a signal during start-up.
// The agent's main passes the context its signals end.
func Open(ctx context.Context, cfg Config, k Knobs) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	workers, share := budget.Size(cfg.CPUs)
	a := &Agent{cfg: cfg, knobs: k, workers: workers, peer: peerlog.New(k.PeerLog)}
	if a.gopts, err = a.serverOptions(); err != nil {
		return nil, err
	}
	var man *dataset.Manifest
	if cfg.Manifest != "" {
		if man, err = dataset.ReadManifest(cfg.Manifest); err != nil {
			return nil, err
		}
	}
	s3 := cfg.S3
	s3.Logger = cfg.Logger
	if a.ds, err = s3src.OpenDataset(ctx, cfg.Data, s3, dataset.OpenOptions{Strict: cfg.Strict, Index: cfg.Index, Logger: cfg.Logger, Manifest: man, VerifyEveryRead: cfg.VerifyEveryRead}); err != nil {
		return nil, err
	}
	logIndexed(cfg.Logger, a.ds)
	if a.srv, err = newServer(a.ds, cfg, workers, share, a.peer); err != nil {
		a.ds.Close()
		return nil, err
	}
	layout, err := a.ds.Layout(uint64(cfg.ShardSize))
	if err == nil {
		a.srv.hold, err = newHolder(cfg.Name, layout, cfg.Replicas, a.ds.MissingShards(layout), a.srv.m)
	}
	if err != nil {
		a.ds.Close()
		return nil, fmt.Errorf("storageagent: shard layout: %w", err)
	}
	cfg.Logger.Info().Int("shards", layout.Len()).Int("missing_shards", len(a.srv.hold.missingWire)).Str("layout", a.srv.hold.digest).Int("replicas", cfg.Replicas).
		Uint64("egress_bytes_per_sec", cfg.Egress).Msg("dataset sharded")
	return a, nil
}

// serverOptions are the gRPC server's options: message sizes, keepalive
// enforcement and, when configured, TLS.
func (a *Agent) serverOptions() ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		// Stop waits for the handlers, so the workers outlive every stream.
		grpc.WaitForHandlers(true),
		grpc.WriteBufferSize(1 << 20),
		grpcbuf.ServerOption(),
	}
	if a.knobs.BufferPool != nil {
		opts = append(opts, experimental.BufferPool(a.knobs.BufferPool))
	}
	if a.cfg.TLS.Enabled() {
		if err := a.checkIdentity(); err != nil {
			return nil, err
		}
		tc, err := a.cfg.TLS.Server(tlsconf.Expect{Cluster: a.cfg.Cluster, Role: tlsconf.RoleCompute})
		if err != nil {
			return nil, fmt.Errorf("%w: tls: %w", ErrConfig, err)
		}
		opts = append(opts, grpc.Creds(tlsconf.Credentials(tc, tlsconf.LogRejects(a.peer, a.cfg.Logger))))
	}
	return opts, nil
}

// Workers is the number of budgeted workers (ceil of the CPU budget).
func (a *Agent) Workers() int { return a.workers }

// checkIdentity checks that the agent's own certificate names a storage
// agent of its cluster called Config.Name: compute agents would refuse
// any other.
func (a *Agent) checkIdentity() error {
	id, err := a.cfg.TLS.Identity()
	if err != nil {
		return fmt.Errorf("%w: tls: %w", ErrConfig, err)
	}
	want := tlsconf.Expect{Cluster: a.cfg.Cluster, Role: tlsconf.RoleStorage, Name: a.cfg.Name}
	if err := want.Check(id); err != nil {
		return fmt.Errorf("%w: tls: this agent's own certificate: %w", ErrConfig, err)
	}
	return nil
}

// Dataset is the dataset the agent serves.
func (a *Agent) Dataset() *dataset.Dataset { return a.ds }

// Config is the agent's configuration with the defaults filled in.
func (a *Agent) Config() Config { return a.cfg }

// Addr is the gRPC listener's address while serving, else nil.
func (a *Agent) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// GossipAddr is the gossip host:port peers reach this agent at while it
// serves with membership, else empty: what other agents join.
func (a *Agent) GossipAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.node == nil {
		return ""
	}
	return a.node.Self().Addr
}

// MetricsAddr is the metrics listener's address while serving with one,
// else nil.
func (a *Agent) MetricsAddr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// MetricsHandler serves GET /metrics and GET /healthz, for embedding the
// agent's metrics in another server.
func (a *Agent) MetricsHandler() http.Handler { return a.srv.m.handler() }

// join announces the agent to the cluster and returns the node and the
// placer that keeps its held shards current.
func (a *Agent) join(lis net.Addr) (*membership.Node, *placer, error) {
	grpcAddr, err := a.advertised(lis)
	if err != nil {
		return nil, nil, err
	}
	h := a.srv.hold
	_, held, _ := h.state()
	meta := membership.Meta{
		Role:        membership.RoleStorage,
		GRPCAddr:    grpcAddr,
		Cores:       a.cfg.CPUs,
		Fingerprint: a.ds.Fingerprint(),
		Version:     a.cfg.Version,
		Replicas:    a.cfg.Replicas,
		Shards:      h.layout.Len(),
		Layout:      h.digest,
		Held:        held,
		Egress:      a.cfg.Egress,
	}
	mc, err := a.cfg.Gossip.Config(a.cfg.Cluster, a.cfg.Name, meta, a.cfg.Insecure, a.cfg.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("storageagent: join cluster: %w", err)
	}
	mc.Transport, mc.Tune, mc.Warnings = a.knobs.GossipTransport, a.knobs.GossipTune, a.peer
	node, err := membership.New(mc)
	if err != nil {
		return nil, nil, fmt.Errorf("storageagent: join cluster: %w", err)
	}
	log := a.cfg.Logger.With().Str("subsystem", "placement").Logger()
	return node, &placer{h: h, node: node, meta: meta, log: log}, nil
}

// advertised is the gRPC address to announce (see Config.Advertise).
func (a *Agent) advertised(lis net.Addr) (string, error) {
	if a.cfg.Advertise != "" {
		return a.cfg.Advertise, nil
	}
	host, port, err := net.SplitHostPort(lis.String())
	if err != nil {
		return "", fmt.Errorf("%w: cannot announce listener address %q: set Advertise", ErrConfig, lis)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return lis.String(), nil
	}
	for _, g := range []string{a.cfg.Gossip.Advertise, a.cfg.Gossip.Bind} {
		if h, _, err := net.SplitHostPort(g); err == nil && h != "" {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				return net.JoinHostPort(h, port), nil
			}
		}
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%w: cannot name this host for %q: set Advertise", ErrConfig, lis)
	}
	return net.JoinHostPort(h, port), nil
}

// Close stops a running Serve, waits for it to return and releases the
// dataset. It is safe to call more than once.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	stop, done := a.stop, a.done
	a.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return a.ds.Close()
}

// logIndexed logs what opening the dataset did.
func logIndexed(log zerolog.Logger, d *dataset.Dataset) {
	st := d.Stats()
	skipped := zerolog.Dict()
	n := 0
	for r, c := range st.Skipped {
		skipped.Int(string(r), c)
		n += c
	}
	ev := log.Info()
	if n > 0 {
		ev = log.Warn()
	}
	ev.Int("samples", st.Samples).Int("missing", st.Missing).Int("skipped", n).Dict("skipped_by_reason", skipped).
		Int("hashed", st.Hashed).Int("reused", st.Reused).Str("index", st.IndexFile).
		Int("headers_read", st.HeadersRead).Int("headers_unknown", st.HeadersUnknown).
		Dur("took", st.Took).Str("fingerprint", d.Fingerprint()).Msg("dataset indexed")
}
