package experiment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/testbed"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/cellbound"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// point is one link point of the grid: its rate (a rate as given, or
// the per-link rates joined with "+"), its rate in bits per second (their
// sum), each storage link's rate and, on the delay line, its WAN (the
// round trip of the point); label names the point: the rate, and on the
// delay line "-rtt" and its round trip after it ("100mbit-rtt20ms").
type point struct {
	label, rate string
	bits        float64
	links       []shape.Rate
	wan         *netns.WAN
}

// points are the grid's link points: one per Config.Rates entry, each
// storage link at that rate, or the one point of Config.StorageRates;
// on the delay line, each of them at each of Config.RTTs.
func (c *Config) points() []point {
	var rates []point
	if len(c.StorageRates) > 0 {
		p := point{rate: shape.Rates(c.StorageRates).String(), links: c.StorageRates}
		p.rate = strings.ReplaceAll(p.rate, ",", "+")
		for _, r := range c.StorageRates {
			p.bits += r.Bits()
		}
		rates = []point{p}
	}
	for _, r := range c.Rates {
		links := make([]shape.Rate, c.StorageNodes)
		for j := range links {
			links[j] = r
		}
		rates = append(rates, point{rate: r.String(), bits: r.Bits(), links: links})
	}
	w := c.wan()
	var out []point
	for _, p := range rates {
		p.label = p.rate
		if w == nil {
			out = append(out, p)
			continue
		}
		for _, d := range c.rtts() {
			q, wd := p, *w
			wd.RTT = d
			q.wan, q.label = &wd, p.rate+"-rtt"+rttName(d)
			out = append(out, q)
		}
	}
	return out
}

// experiment is a Run in progress.
type experiment struct {
	cfg  Config
	bins binaries
	res  *results.Results
	pin  bed.Pins
	// cores is the machine's cores as this process may use them
	// (cpuquota.Cores): the storage nodes' quotas and the compute nodes'
	// share them (bed.ComputeCPUs).
	cores float64
	// profile is the experiment's stage 2 profile, its samples only; each
	// cell's runs use cellProfile, a copy that also keeps the resources
	// the compute agents measure at that cell's rate and CPU (see
	// useCellProfile). With several compute agents each rank has its own
	// of both (rankPath).
	profile, cellProfile string
	// ref maps (epoch, sample) to the tensor hash the reference run (the
	// first exactly-once run, or Config.Reference) delivered, for the
	// pipeline the runs now use (pipe); refs keeps each pipeline's.
	ref  map[[2]uint64]string
	refs map[string]map[[2]uint64]string
	// pipe is the pipeline the runs now use (one of Config.Pipelines);
	// pipeIdx its index there.
	pipe    string
	pipeIdx int
	// fidelityFrom is, per pipeline, its first exactly-once 1 x 1 run's
	// samples file: a lossy pipeline's fidelity is computed from it.
	fidelityFrom map[string]fidelitySource
	// noCgroups is set once making cgroups failed: later cells do without.
	noCgroups bool
	// trainScript is train_cnn.py with Config.Train; trainErr why the
	// training rows cannot run, or nil.
	trainScript string
	trainErr    error
	// storageTLS and computeTLS are the agents' security flags for the
	// current cell, one per storage agent and one per compute agent (rank):
	// a fresh CA's certificates and gossip key, or --insecure.
	storageTLS, computeTLS [][]string
}

// multi reports whether the experiment runs several storage or compute
// nodes (the star), rather than the two-node link.
func (x *experiment) multi() bool { return x.cfg.StorageNodes > 1 || x.cfg.ComputeNodes > 1 }

// rankPath is path for compute agent rank: path itself with one compute
// agent, else path with "-rank<rank>" before its extension.
func (x *experiment) rankPath(path string, rank int) string {
	if x.cfg.ComputeNodes <= 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-rank" + strconv.Itoa(rank) + ext
}

// nxmSkip is why the peer and trainer rows do not run with several nodes.
const nxmSkip = "runs on the 1 x 1 topology only (it reads from one storage node into one compute node)"

// newBed brings up a cell's nodes and links for rate point p, with
// their cgroups (cpus storage cores per storage node, pinned as x.pin
// says) where cgroups can be made. On error it removes what it made.
func (x *experiment) newBed(ctx context.Context, p point, cpus float64) (*bed.Bed, error) {
	links, computeLinks, err := x.jobLinks(p)
	if err != nil {
		return nil, err
	}
	b, err := bed.New(ctx, bed.Config{Netns: x.res.Mode == results.ModeNetns, Label: p.label, Links: links,
		ComputeNodes: x.cfg.ComputeNodes, ComputeLinks: computeLinks, WAN: p.wan, CongestionControl: x.cfg.CongestionControl,
		ComputeApart: computeApart(x.cfg) > 1})
	if err != nil {
		return nil, err
	}
	if b.Netns() && cgroup.Available() == nil && !x.noCgroups {
		compute, err := bed.ComputeCPUs(x.cores, b.StorageNodes(), cpus, x.pin, computeApart(x.cfg))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%w: %w", ErrConfig, err), b.Close())
		}
		if err := b.MakeGroups(cpus, x.pin, compute); err != nil {
			// A cgroup hierarchy can be mounted yet refuse new groups
			// (read-only in a container): the agent's own --cpus budget
			// still limits its ops, so carry on and say so.
			x.noCgroups = true
			x.res.ModeNote += fmt.Sprintf("; cgroups could not be made (%v): the storage agent's --cpus budget alone limits it, and nothing is pinned", err)
			x.res.Machine.Pinning = "not pinned (no cgroups)"
			x.cfg.Log.Warn().Err(err).Msg("no cgroups: the storage agent's --cpus budget alone limits it")
		}
	}
	return b, nil
}

// cell runs every policy (and the trainer and the peer) at one rate point
// and storage CPU limit; rep numbers the repetition with --repeat (0:
// none).
func (x *experiment) cell(ctx context.Context, p point, cpus float64, rep int) (results.Cell, error) {
	cell := results.Cell{Rate: p.rate, RateBitsPerSec: p.bits, StorageCPUs: cpus, Repetition: rep, LinkPayloadFraction: 1}
	if x.res.Mode == results.ModeNetns {
		cell.LinkPayloadFraction = netns.PayloadFraction(netns.DefaultMTU, true)
	}
	if w := p.wan; w != nil {
		cell.DelayLine = true
		cell.RTTMs, cell.JitterMs, cell.Loss = durationMs(w.RTT), durationMs(w.Jitter), w.Loss
		cell.LinkPayloadFraction = netns.PayloadFraction(cmp.Or(x.cfg.WANMTU, netns.DefaultMTU), false)
	}
	if x.multi() {
		for _, r := range p.links {
			cell.StorageRates = append(cell.StorageRates, r.String())
		}
	}
	dir := filepath.Join(x.cfg.Out, cellDir(p.label, cpus, rep))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cell, err
	}
	b, err := x.newBed(ctx, p, cpus)
	if err != nil {
		return cell, err
	}
	cell.ComputeCPUs = b.ComputeQuota()
	if q := b.ComputeNodeQuota(); q != cell.ComputeCPUs {
		cell.ComputeCPUsEach = q
	}
	cell.CongestionControl = b.CongestionControl()
	defer func() {
		if err := b.Close(); err != nil {
			x.cfg.Log.Warn().Err(err).Msg("cell teardown")
		}
	}()
	if err := x.certs(dir, b); err != nil {
		return cell, err
	}
	addrs, err := x.startStorage(ctx, b, dir, cpus)
	if err != nil {
		return cell, err
	}
	for i := range x.cfg.Pipelines {
		if err := x.pipelineRuns(ctx, &cell, b, dir, addrs, p.label, cpus, i); err != nil {
			return cell, err
		}
	}
	if x.cfg.Train {
		if err := x.trainerRuns(ctx, &cell, b, dir, addrs, p.label, cpus); err != nil {
			return cell, err
		}
	}
	x.usePipeline(0) // the peer runs the first
	if err := x.useCellProfile(p.label, cpus); err != nil {
		return cell, err
	}
	if x.cfg.Peer {
		run := results.Run{Policy: results.PeerPolicy, Skipped: "the peer row " + nxmSkip}
		if !x.multi() {
			run = x.runPeer(ctx, b, dir, cpus)
		}
		cell.Runs = append(cell.Runs, run)
	}
	return cell, ctx.Err()
}

// trainerRuns appends the cell's trainer rows: one per pipeline, each
// training through its own pipeline, named by it with several (in its
// pipeline's folder, beside that pipeline's policy rows).
func (x *experiment) trainerRuns(ctx context.Context, cell *results.Cell, b *bed.Bed, dir string, addrs []string, label string, cpus float64) error {
	if x.multi() {
		cell.Runs = append(cell.Runs, results.Run{Policy: results.TrainerPolicy, Plan: x.cfg.TrainPolicy, Training: true,
			Skipped: "the trainer row " + nxmSkip})
		return nil
	}
	multi := len(x.cfg.Pipelines) > 1
	for i := range x.cfg.Pipelines {
		x.usePipeline(i)
		if err := x.useCellProfile(label, cpus); err != nil {
			return err
		}
		tdir := dir
		if multi {
			tdir = filepath.Join(dir, pipeName(x.pipe))
		}
		run := x.runTrainer(ctx, b, tdir, addrs[0], cpus)
		if multi {
			run.Pipeline = x.pipe
		}
		cell.Runs = append(cell.Runs, run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// pipelineRuns runs every policy of the cell with pipeline i
// (Config.Pipelines) and appends the runs and the pipeline's bound to
// cell. With several pipelines each has a folder of its own under dir
// and its runs name it (Run.Pipeline).
func (x *experiment) pipelineRuns(ctx context.Context, cell *results.Cell, b *bed.Bed, dir string, addrs []string, label string, cpus float64, i int) error {
	x.usePipeline(i)
	multi := len(x.cfg.Pipelines) > 1
	if multi {
		dir = filepath.Join(dir, pipeName(x.pipe))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := x.useCellProfile(label, cpus); err != nil {
		return err
	}
	runs := policyRuns(x.cfg.Policies, x.cfg.WorkConserving, x.cfg.Placements)
	if x.cfg.JobsWholeBudget {
		runs = withWhole(runs)
	}
	from := len(cell.Runs)
	for _, pr := range runs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		run := x.runPolicy(ctx, b, dir, addrs, cpus, pr)
		if multi {
			run.Pipeline = x.pipe
		}
		if _, ok := x.fidelityFrom[x.pipe]; !ok && run.ExactlyOnce && b.ComputeNodes() == 1 {
			x.fidelityFrom[x.pipe] = fidelitySource{samples: x.rankFiles(dir, pr.name, 0).samples,
				run: fmt.Sprintf("%s, %g storage CPUs, %s", label, cpus, pr.name)}
		}
		if err := x.shareProfile(); err != nil {
			return err
		}
		cell.Runs = append(cell.Runs, run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	// The bound over this pipeline's profile, at its runs' steady epoch.
	view := *cell
	view.Runs = cell.Runs[from:]
	bound := cellbound.Of(&view, cellbound.Inputs{Profile: x.cellProfile, Pipeline: x.pipe, Dataset: x.res.Dataset.Path,
		Seed: x.cfg.Seed, StorageNodes: x.cfg.StorageNodes, ComputeNodes: x.cfg.ComputeNodes, GPURate: x.cfg.GPURate,
		ComputeFlags: x.cfg.ComputeFlags, CacheBytes: x.res.CacheBytes, Log: x.cfg.Log})
	if i == 0 {
		cell.Bound = bound
	}
	if multi {
		bound.Pipeline = x.pipe
		cell.PipelineBounds = append(cell.PipelineBounds, bound)
	}
	return nil
}

// usePipeline makes pipeline i of Config.Pipelines the one the runs use:
// its profile, and its reference tensors (each pipeline's tensors differ).
func (x *experiment) usePipeline(i int) {
	if x.refs == nil {
		x.refs = map[string]map[[2]uint64]string{}
	}
	next := x.cfg.Pipelines[i]
	if x.pipe != "" { // the first call keeps the reference Run read
		x.refs[x.pipe] = x.ref
		x.ref = x.refs[next]
	}
	x.pipeIdx, x.pipe = i, next
	x.profile = x.pipeProfile(i)
}

// pipeProfile is pipeline i's experiment profile: Out/profile.zst for the
// first (as with one pipeline), Out/profile-<pipeline>.zst for the others.
// trainerProfile is the trainer rows' own profile of pipeline i.
func (x *experiment) trainerProfile(i int) string {
	if i == 0 {
		return filepath.Join(x.cfg.Out, "profile-trainer.zst")
	}
	return filepath.Join(x.cfg.Out, "profile-trainer-"+pipeName(x.cfg.Pipelines[i])+".zst")
}

func (x *experiment) pipeProfile(i int) string {
	if i == 0 {
		return filepath.Join(x.cfg.Out, "profile.zst")
	}
	return filepath.Join(x.cfg.Out, "profile-"+pipeName(x.cfg.Pipelines[i])+".zst")
}

// pipeName is a pipeline's name in file names: a preset's own, a spec
// file's path with its separators as underscores.
func pipeName(p string) string {
	return strings.ReplaceAll(strings.Trim(filepath.ToSlash(filepath.Clean(p)), "/"), "/", "_")
}

// certs makes the cell's agents' security flags: a fresh CA with a
// certificate per storage agent, valid for every storage node's address,
// and one per compute agent; or --insecure for all of them.
func (x *experiment) certs(dir string, b *bed.Bed) error {
	x.storageTLS, x.computeTLS = nil, nil
	if x.cfg.Insecure {
		for range b.StorageNodes() {
			x.storageTLS = append(x.storageTLS, []string{"--insecure"})
		}
		for range b.ComputeNodes() {
			x.computeTLS = append(x.computeTLS, []string{"--insecure"})
		}
		return nil
	}
	var err error
	x.storageTLS, x.computeTLS, err = testbed.ClusterCerts(filepath.Join(dir, "certs"), b.StorageNodes(), b.ComputeNodes(), b.StorageHosts()...)
	return err
}

// startStorage starts a storage agent on every storage node, each with
// its own name and cgroup, all serving the same dataset, and returns the
// addresses the compute agents dial, in storage node order (through each
// node's shaping proxy on loopback).
func (x *experiment) startStorage(ctx context.Context, b *bed.Bed, dir string, cpus float64) ([]string, error) {
	var addrs []string
	for i := range b.StorageNodes() {
		listen, err := b.ListenAddr(i, storagePort)
		if err != nil {
			return nil, err
		}
		data, bin, env, err := x.storageData(ctx, b, i, dir)
		if err != nil {
			return nil, err
		}
		sargs := append(env, bin, "--data", data, "--listen", listen, "--cpus", strconv.FormatFloat(cpus, 'f', -1, 64),
			"--log-level", "warn", "--log-format", "json")
		sargs = append(append(sargs, x.storageTLS[i]...), x.cfg.StorageFlags...)
		logPath, what := filepath.Join(dir, "storage-agent.log"), "storage agent"
		if b.StorageNodes() > 1 {
			logPath, what = filepath.Join(dir, fmt.Sprintf("storage-agent-%d.log", i+1)), testbed.StorageName(i)
		}
		srv, err := b.StartServer(ctx, bed.StorageHost(i), logPath, listen, sargs[0], sargs[1:]...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		b.SetStorageAgent(i, srv.Pid())
		addr, err := b.Front(i, listen)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// durationMs is d in milliseconds.
func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cellDir is a cell's folder under Config.Out: "100mbit-cpu0.5" (its
// point's label, with the round trip on the delay line:
// "100mbit-rtt20ms-cpu0.5"), and "-rep2" after it for a repetition.
func cellDir(rate string, cpus float64, rep int) string {
	d := fmt.Sprintf("%s-cpu%s", rate, strconv.FormatFloat(cpus, 'f', -1, 64))
	if rep > 0 {
		d += fmt.Sprintf("-rep%d", rep)
	}
	return d
}

// useCellProfile points the cell's runs at the profile of its rate and
// storage CPU, made from the experiment's samples when there is none yet.
// A compute agent keeps the running means of the resources it measured
// (link rate, storage speed, the last No-Off epoch) in the profile and
// plans from them when it reuses it, as a deployment reuses its profile;
// a cell of another rate or CPU is other hardware, so each cell has its
// own means, shared by its repetitions. Each rank has its own profile
// (rankPath): it profiles, and plans for, its own shard.
func (x *experiment) useCellProfile(rate string, cpus float64) error {
	name := fmt.Sprintf("profile-%s-cpu%s.zst", rate, strconv.FormatFloat(cpus, 'f', -1, 64))
	if x.pipeIdx > 0 { // the first pipeline's keep their names
		name = "profile-" + pipeName(x.pipe) + "-" + strings.TrimPrefix(name, "profile-")
	}
	x.cellProfile = filepath.Join(x.cfg.Out, name)
	for rank := range x.cfg.ComputeNodes {
		cell := x.rankPath(x.cellProfile, rank)
		if _, err := os.Stat(cell); err == nil {
			continue
		}
		if err := copySamples(x.rankPath(x.profile, rank), cell); err != nil {
			return err
		}
	}
	return nil
}

// shareProfile makes the experiment's profile from the cell's once a run
// has recorded it (the first run of the first cell), rank by rank.
func (x *experiment) shareProfile() error {
	for rank := range x.cfg.ComputeNodes {
		exp := x.rankPath(x.profile, rank)
		if _, err := os.Stat(exp); err == nil {
			continue
		}
		if err := copySamples(x.rankPath(x.cellProfile, rank), exp); err != nil {
			return err
		}
	}
	return nil
}

// copySamples saves the profile at from, without its measured resources,
// at to; nothing when from does not exist yet.
func copySamples(from, to string) error {
	p, err := profiler.Load(from, "", "")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("profile %s: %w", from, err)
	}
	p.Resources = nil
	return profiler.Save(to, p)
}
