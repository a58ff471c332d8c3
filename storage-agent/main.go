// Command storage-agent serves a dataset to compute agents: it runs the
// requested prefix of each sample's preprocessing pipeline next to the data
// within a CPU budget and streams the intermediates over gRPC. See
// package storageagent and docs/architecture.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/sophon-dl/sophon/internal/cli"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/budget"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usageHead = `Usage: storage-agent --data DIR|s3://BUCKET/PREFIX (--tls-cert F --tls-key F --tls-ca F | --insecure) [flags]
       storage-agent certs --out DIR [--cluster NAME] [--storage NAMES] [--compute NAMES] [--hosts HOSTS] [--days N]
       storage-agent manifest --data DIR --out FILE
       storage-agent place --manifest FILE --members NAMES [--replicas R] [--shard-size N] [--member NAME]
       storage-agent index --data DIR [--index FILE] [--manifest FILE] [--progress 5s]

Serves the dataset in DIR (an ImageFolder: one folder per class; or
WebDataset-style *.tar shards) to compute agents over gRPC, running the
requested prefix ops[0:k] of each sample's pipeline within a CPU budget, and
announces itself to the cluster through memberlist gossip.

Object stores: --data s3://BUCKET/PREFIX serves the same layouts from an
S3-compatible store (keys CLASS/NAME.jpg, or *.tar objects read by ranged
GETs). Credentials, region and server follow the AWS conventions:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else
~/.aws/credentials with AWS_PROFILE, else the instance's role; AWS_REGION;
AWS_ENDPOINT_URL (path-style requests to it). The credentials need
s3:ListBucket and s3:GetObject only (docs/deploy.md, "Object stores").
The listing logs its progress every 5 s; a page without an answer within
--s3-page-timeout, a listing past --s3-list-timeout, or pages that do not
advance (a continuation token answered twice, keys out of order) fail the
start naming the bucket, prefix, page and token.

Secure by default: gRPC is mutual TLS 1.3 and only compute agents whose
certificate (signed by --tls-ca) names them sophon://CLUSTER/compute/NAME
are served; gossip is encrypted with the cluster's key and labelled with
--cluster. "storage-agent certs" (or make certs) makes a development CA, the
nodes' certificates and a gossip key; --insecure turns all of it off.

Shards and replicas: the catalog is split into shards (the tar files, or
--shard-size id ranges of a folder of images) and each shard is held by the
--replicas storage agents ranked highest by rendezvous hashing among the
live agents serving the same dataset. Either every agent has the whole
dataset (a shared file system or full copies), or each has part of its
files and all run with --manifest FILE, the whole dataset's catalog that
"storage-agent manifest" writes from a full copy; "storage-agent place"
lists the files each agent should then have. An agent never holds a shard
it lacks a file of, and serves every sample it has. The held and missing
shards, the layout and --egress are announced in Info and gossip.

Example:

  storage-agent --data /srv/imagenet/train --listen :7070 --name s1 \
    --gossip 10.0.0.5:7946 --join 10.0.0.9:7946 --cpus 2.5 --metrics :9100 \
    --tls-cert storage-s1.pem --tls-key storage-s1-key.pem --tls-ca ca.pem \
    --gossip-key-file gossip.key --replicas 2 --egress 10gbit

Start-up indexes the dataset: it lists the samples and hashes those its
index file (--index) lacks, logging files/s, bytes/s and an ETA every 5 s.
"storage-agent index --data DIR" does only that and exits, so that an
operator can index a large dataset before the first start.

A --config FILE in YAML takes the same keys as the flags (data: ..., cpus: 2.5,
join: [a:7946, b:7946], request-timeout: 30s, ...); flags given on the command
line override the file. SIGINT or SIGTERM stops the agent gracefully, at
any point of its start-up too.

Flags:
`

// settings are the command line and config file keys.
type settings struct {
	cli.Common      `yaml:",inline"`
	Data            string        `yaml:"data"`
	Strict          bool          `yaml:"strict"`
	Index           string        `yaml:"index"`
	VerifyEveryRead bool          `yaml:"verify-every-read"`
	Listen          string        `yaml:"listen"`
	Advertise       string        `yaml:"advertise"`
	CPUs            float64       `yaml:"cpus"`
	Queue           int           `yaml:"queue"`
	Pipelines       cli.List      `yaml:"pipeline"`
	ClientSpecs     bool          `yaml:"allow-client-specs"`
	MaxStreams      int           `yaml:"max-streams"`
	MaxPeerStreams  int           `yaml:"max-streams-per-peer"`
	StallTimeout    time.Duration `yaml:"stall-timeout"`
	// Limits are the ops limits, flags shared with the compute agent.
	oplimits.Settings `yaml:",inline"`
	IdleRelease       time.Duration `yaml:"idle-release"`
	RequestTimeout    time.Duration `yaml:"request-timeout"`
	ShutdownGrace     time.Duration `yaml:"shutdown-grace"`
	GCPercent         int           `yaml:"gc-percent"`
	MemoryLimit       int64         `yaml:"memory-limit"`
	Replicas          int           `yaml:"replicas"`
	ShardSize         int           `yaml:"shard-size"`
	Manifest          string        `yaml:"manifest"`
	Egress            rate          `yaml:"egress"`
	SendBuffer        int           `yaml:"send-buffer"`
	TCPCongestion     string        `yaml:"tcp-congestion"`
	S3MaxObjects      int           `yaml:"s3-max-objects"`
	S3Addressing      string        `yaml:"s3-addressing"`
	S3Retries         int           `yaml:"s3-retries"`
	S3PageTimeout     time.Duration `yaml:"s3-page-timeout"`
	S3ListTimeout     time.Duration `yaml:"s3-list-timeout"`
	JobWeights        weights       `yaml:"job-weights"`
	JobWindow         time.Duration `yaml:"job-window"`
	MaxJobs           int           `yaml:"max-jobs"`
	JobShares         bool          `yaml:"job-shares"`
}

func defaults() settings {
	c := storageagent.DefaultConfig()
	return settings{
		Common:         cli.DefaultCommon(),
		CPUs:           0,
		RequestTimeout: c.RequestTimeout,
		ShutdownGrace:  c.ShutdownGrace,
		MaxStreams:     storageagent.DefaultMaxStreams,
		MaxPeerStreams: storageagent.DefaultMaxStreamsPerPeer,
		StallTimeout:   storageagent.DefaultStallTimeout,
		Settings:       oplimits.Default(),
		IdleRelease:    storageagent.DefaultIdleRelease,
		GCPercent:      defaultGCPercent,
		Replicas:       c.Replicas,
		ShardSize:      c.ShardSize,
		Manifest:       c.Manifest,
		SendBuffer:     c.SendBuffer,
		S3MaxObjects:   s3src.DefaultMaxObjects,
		S3Retries:      s3src.DefaultMaxRetries,
		S3PageTimeout:  s3src.DefaultPageTimeout,
		S3ListTimeout:  s3src.DefaultListTimeout,
		JobWindow:      budget.DefaultJobWindow,
		MaxJobs:        budget.DefaultMaxJobs,
		JobShares:      true,
	}
}

func flagSet(s *settings, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("storage-agent", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageHead)
		fs.PrintDefaults()
	}
	s.Common.Register(fs, cli.StorageRole)
	fs.StringVar(&s.Data, "data", s.Data, "dataset `directory`, or s3://BUCKET/PREFIX of an S3-compatible object store (ImageFolder or *.tar shards); required")
	fs.IntVar(&s.S3MaxObjects, "s3-max-objects", s.S3MaxObjects, "with an s3:// --data, the most `objects` the listing may return; more refuses the dataset")
	fs.StringVar(&s.S3Addressing, "s3-addressing", s.S3Addressing, "with an s3:// --data: path, virtual or auto `style` (default: path with AWS_ENDPOINT_URL, auto for Amazon S3)")
	fs.IntVar(&s.S3Retries, "s3-retries", s.S3Retries, "with an s3:// --data, the `tries` of one request on throttling (503 SlowDown, 429) and 5xx, with exponential back-off and full jitter")
	fs.DurationVar(&s.S3PageTimeout, "s3-page-timeout", s.S3PageTimeout, "with an s3:// --data, the longest one list request (a page of 1,000 keys), its retries included, may take: what ends a stalled listing")
	fs.DurationVar(&s.S3ListTimeout, "s3-list-timeout", s.S3ListTimeout, "with an s3:// --data, the longest the whole listing may take (1,000 keys a page: the default --s3-max-objects are 4,200 pages, 7 to 10 minutes at 100 to 150 ms a page)")
	fs.BoolVar(&s.Strict, "strict", s.Strict, "refuse to start on any bad entry in the dataset (dangling or escaping symlink, unreadable file, damaged shard, duplicate key); default: skip, log and count them")
	fs.BoolVar(&s.VerifyEveryRead, "verify-every-read", s.VerifyEveryRead, "hash every read of a sample file against the index (its SHA-256, about 0.7 ns a byte); default: hash a file at its first read and again whenever its change time (ctime) moves, trusting reads of a file unchanged since one that matched; shard members and objects are hashed at every read either way")
	fs.StringVar(&s.Index, "index", s.Index, "content-hash index `file`, so restarts hash only what changed; - for none (default: DIR/.sophon-index when writable, else the user cache dir)")
	fs.StringVar(&s.Listen, "listen", s.Listen, "gRPC listen `address` (default "+storageagent.DefaultListen+", every interface; with --insecure "+storageagent.InsecureListen+", loopback only, unless this names an address)")
	fs.StringVar(&s.Advertise, "advertise", s.Advertise, "gRPC `host:port` announced to peers (default: the listen address, a wildcard host replaced by the gossip host or hostname)")
	fs.Float64Var(&s.CPUs, "cpus", s.CPUs, "CPU `cores` for running ops, fractions allowed (default: all)")
	fs.IntVar(&s.Queue, "queue", s.Queue, "requests one stream may have in the agent at once, queued, running or unsent (default: 128 or 4 per worker, whichever is more)")
	fs.Var(&s.Pipelines, "pipeline", "pipelines the agent runs for clients, comma-separated preset `names` or spec files; clients may also run the first ops of these (default: every preset)")
	fs.BoolVar(&s.ClientSpecs, "allow-client-specs", s.ClientSpecs, "let clients send pipeline specs of their own (still bounded by the server's decode and op limits)")
	fs.IntVar(&s.MaxStreams, "max-streams", s.MaxStreams, "open fetch streams the agent accepts, all peers together")
	fs.IntVar(&s.MaxPeerStreams, "max-streams-per-peer", s.MaxPeerStreams, "open fetch streams one peer (certificate identity, or IP without TLS) may have, over all its connections (a compute agent opens one per --conns connection, plus stage 1's)")
	s.Settings.Register(fs)
	fs.DurationVar(&s.StallTimeout, "stall-timeout", s.StallTimeout, "health turns NOT_SERVING when every worker of a pool has been on one job this long")
	fs.DurationVar(&s.IdleRelease, "idle-release", s.IdleRelease, "after this long without a job, return the memory a burst left behind to the OS (a forced GC); negative never")
	fs.DurationVar(&s.RequestTimeout, "request-timeout", s.RequestTimeout, "longest a request may wait in the queue before failing with DEADLINE")
	fs.DurationVar(&s.ShutdownGrace, "shutdown-grace", s.ShutdownGrace, "how long open streams may finish on shutdown before they are cut")
	fs.Int64Var(&s.MemoryLimit, "memory-limit", s.MemoryLimit, "soft limit on the Go heap in `bytes` (GOMEMLIMIT; libjpeg's own memory is bounded per decode on top); 0 means 256 MiB plus 32 MiB per worker; ignored when GOMEMLIMIT is set")
	fs.IntVar(&s.GCPercent, "gc-percent", s.GCPercent, "Go GC target `percent` (GOGC); ignored when the GOGC environment variable is set")
	fs.IntVar(&s.Replicas, "replicas", s.Replicas, "storage `agents` that hold each shard, chosen by rendezvous hashing among the live agents of this dataset, layout and replica count; 0, or at least that many agents, means every agent holds every shard. "+
		"Every agent must have the whole dataset: fetches for shards it does not hold are still served")
	fs.IntVar(&s.ShardSize, "shard-size", s.ShardSize, "`samples` per shard of a folder of images (the last shard may be shorter); a dataset of *.tar files is sharded by its files. At most 1048576 shards")
	fs.StringVar(&s.Manifest, "manifest", s.Manifest, "the whole dataset's manifest `file` (storage-agent manifest) when --data holds only part of its files: the agent serves its catalog and fingerprint, from the files it has (checked against it), and never holds a shard it lacks a file of")
	fs.Var(&s.Egress, "egress", "this node's egress `rate` in tc syntax (500mbit, 10gbit, 1.25gbps), announced to compute agents for planning; 0 means unknown")
	fs.IntVar(&s.SendBuffer, "send-buffer", s.SendBuffer, "kernel send buffer of each connection in `bytes` (SO_SNDBUF; SO_SNDBUFFORCE with CAP_NET_ADMIN): what keeps the link busy while a CPU limit throttles the agent; at least the egress rate times 100 ms. 0 leaves the kernel's autotuning")
	fs.Var(&s.JobWeights, "job-weights", "the jobs' `weights`, name=weight comma-separated (a=2,b=1), by the name their compute agents send (compute-agent --job): each active job gets the budget's share weight/(active jobs' weights), told in Info, and the fair queue serves it so; a job not named weighs 1")
	fs.DurationVar(&s.JobWindow, "job-window", s.JobWindow, "how long a job without an open fetch stream still counts as active after its last stream or Info, unless its compute agent said it was leaving (as one does when it closes)")
	fs.IntVar(&s.MaxJobs, "max-jobs", s.MaxJobs, "active `jobs` the agent serves at once; a stream of another job is refused")
	fs.BoolVar(&s.JobShares, "job-shares", s.JobShares, "tell each job its share of --cpus in Info; false tells every job the whole budget (each plans as if it were alone, as before shares), the queue still serving the jobs by weight")
	fs.StringVar(&s.TCPCongestion, "tcp-congestion", s.TCPCongestion, tcpinfo.FlagUsage)
	return fs
}

// parse reads the command line and the config file it names.
func parse(args []string, out io.Writer) (settings, error) {
	return cli.Parse(args, defaults, func(s *settings) *flag.FlagSet { return flagSet(s, out) },
		func(s *settings) string { return s.Config })
}

func (s settings) agentConfig(log zerolog.Logger) storageagent.Config {
	c := storageagent.DefaultConfig()
	c.Data = s.Data
	c.Strict = s.Strict
	c.VerifyEveryRead = s.VerifyEveryRead
	c.Index = s.Index
	c.Listen = s.Listen
	c.Advertise = s.Advertise
	c.Gossip = s.GossipSettings()
	c.Cluster = s.Cluster
	c.Insecure = s.Insecure
	c.Name = s.Name
	c.CPUs = s.CPUs
	c.Queue = s.Queue
	c.Pipelines = s.Pipelines
	c.AllowClientSpecs = s.ClientSpecs
	c.MaxStreams = s.MaxStreams
	c.MaxStreamsPerPeer = s.MaxPeerStreams
	c.StallTimeout = s.StallTimeout
	c.IdleRelease = s.IdleRelease
	c.OpTimeout = s.OpTimeout
	c.Limits = s.Settings.Limits()
	c.RequestTimeout = s.RequestTimeout
	c.ShutdownGrace = s.ShutdownGrace
	c.MetricsAddr = s.Metrics
	c.TLS = s.TLSFiles()
	c.Replicas = s.Replicas
	c.ShardSize = s.ShardSize
	c.Manifest = s.Manifest
	c.Egress = uint64(s.Egress)
	c.SendBuffer = s.SendBuffer
	c.TCPCongestion = s.TCPCongestion
	c.S3 = s3src.Config{MaxObjects: s.S3MaxObjects, Addressing: s.S3Addressing, MaxRetries: s.S3Retries,
		PageTimeout: s.S3PageTimeout, ListTimeout: s.S3ListTimeout}
	c.JobWeights = s.JobWeights
	c.JobWindow = s.JobWindow
	c.MaxJobs = s.MaxJobs
	c.NoJobShares = !s.JobShares
	c.Version = version
	c.Logger = log
	return c
}

// rate is a flag of a tc-style rate, kept in bytes per second; 0 means
// unknown.
type rate uint64

// parseRate reads a tc rate ("500mbit", "10gbit", "1.25gbps") in bytes
// per second, rounded; "0" (any unit) is 0, unknown.
func parseRate(s string) (uint64, error) {
	bits, err := cli.ParseBitRate(s)
	if err != nil {
		return 0, err
	}
	bytes := math.Round(bits / 8)
	switch {
	case bits == 0:
		return 0, nil
	case bytes < 1:
		return 0, fmt.Errorf("rate %q is below one byte per second", s)
	case bytes >= math.MaxUint64:
		return 0, fmt.Errorf("rate %q is too large", s)
	}
	return uint64(bytes), nil
}

// Set implements flag.Value.
func (r *rate) Set(s string) error {
	v, err := parseRate(s)
	if err != nil {
		return err
	}
	*r = rate(v)
	return nil
}

// String is the rate in bytes per second, with "bps" (tc's bytes-per-second
// unit) so that it parses back.
func (r *rate) String() string {
	if r == nil || *r == 0 {
		return "0"
	}
	return strconv.FormatUint(uint64(*r), 10) + "bps"
}

// UnmarshalYAML implements yaml.Unmarshaler: "egress: 500mbit".
func (r *rate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: egress: want a rate such as 500mbit", n.Line)
	}
	return r.Set(n.Value)
}

// weights is the --job-weights flag: job name to weight.
type weights map[string]float64

// Set implements flag.Value: "a=2,b=1"; an empty string is no weights.
func (w *weights) Set(s string) error {
	out := weights{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		name, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("job weight %q: want name=weight", kv)
		}
		if err := dataplanepb.CheckJobName(name); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || f > 1e6 {
			return fmt.Errorf("job %q: weight %q: want a number in (0, 1e6]", name, v)
		}
		out[name] = f
	}
	*w = out
	return nil
}

// String is the weights as Set reads them, sorted by name.
func (w *weights) String() string {
	if w == nil {
		return ""
	}
	parts := make([]string, 0, len(*w))
	for _, name := range slices.Sorted(maps.Keys(*w)) {
		parts = append(parts, name+"="+strconv.FormatFloat((*w)[name], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// UnmarshalYAML implements yaml.Unmarshaler: "job-weights: a=2,b=1" or a
// mapping.
func (w *weights) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return w.Set(n.Value)
	}
	var m map[string]float64
	if err := n.Decode(&m); err != nil {
		return err
	}
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	return w.Set(strings.Join(parts, ","))
}

func run(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "certs":
			return cli.Certs("storage-agent", args[1:], os.Stdout)
		case "manifest":
			return manifestCmd(args[1:], os.Stdout, os.Stderr)
		case "place":
			return placeCmd(args[1:], os.Stdout, os.Stderr)
		case "index":
			return indexCmd(args[1:], os.Stdout, os.Stderr)
		}
	}
	s, log, stopProfile, code, ok := cli.Start("storage-agent", args, parse, os.Stderr)
	if !ok {
		return code
	}
	defer stopProfile()
	// NB: the signals are caught before the dataset is opened, which may
	// take long (an object store's listing, hashing): as PID 1 of a
	// container the agent would otherwise ignore SIGTERM until it serves.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli.SetGCPercent(s.GCPercent)
	a, err := storageagent.Open(ctx, s.agentConfig(log), storageagent.Knobs{})
	if err != nil {
		if ctx.Err() != nil {
			log.Info().Err(err).Msg("start-up stopped by signal")
			return 0
		}
		log.Error().Err(err).Msg("cannot start")
		return 1
	}
	defer a.Close()
	limit := s.MemoryLimit
	if limit == 0 {
		limit = defaultMemoryLimit(a.Workers())
	}
	cli.SetMemoryLimit(limit)
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("stopped")
		return 1
	}
	return 0
}

// defaultGCPercent is the storage agent's GC target. Its live heap is
// small (queued requests and in-flight results) while it allocates a
// sample-sized buffer per request, so with Go's default of 100 it would
// collect every few megabytes and spend a large share of the CPU it has
// per byte served on collecting. 400 collects a quarter as often for a
// heap a few tens of megabytes larger, which defaultMemoryLimit bounds.
const defaultGCPercent = 400

// defaultMemoryLimit is the Go heap's soft limit for a pool of workers:
// room for the buffered results (128 MiB at most, see storageagent) and
// each worker's sample in flight. With the 400% GC target the heap would
// otherwise grow to five times its live size.
func defaultMemoryLimit(workers int) int64 { return 256<<20 + int64(workers)*32<<20 }

func main() { os.Exit(run(os.Args[1:])) }
