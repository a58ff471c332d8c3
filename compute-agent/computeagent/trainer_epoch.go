package computeagent

import (
	"context"
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/epoch"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/ops"
)

// pipelineTail is the end of a pipeline that the trainer client runs on
// its device: to_tensor, then normalize when present.
type pipelineTail struct {
	normalize *ops.Normalize
}

// cutTail splits a pipeline ending in to_tensor (and maybe normalize) into
// the prefix the agent runs, which ends in a uint8 image, and that tail.
func cutTail(p *ops.Pipeline) (*ops.Pipeline, *pipelineTail, error) {
	n := p.Len()
	tail := &pipelineTail{}
	cut := n
	if nz, ok := p.Op(n - 1).(ops.Normalize); ok && n >= 2 {
		tail.normalize = &nz
		cut--
	}
	if _, ok := p.Op(cut - 1).(ops.ToTensor); !ok {
		return nil, nil, configErr("uint8 slots: pipeline %s must end in to_tensor or to_tensor, normalize (or use --dtype float32)", p.ID())
	}
	cut--
	spec := p.Spec()
	spec.Name += "-uint8"
	spec.Ops = spec.Ops[:cut]
	q, err := spec.Build()
	if err != nil {
		return nil, nil, configErr("uint8 slots: %v", err)
	}
	return q, tail, nil
}

// trainerDType is the slots' dtype.
func (a *Agent) trainerDType() string {
	if a.cfg.Trainer.DType == "" {
		return "uint8"
	}
	return a.cfg.Trainer.DType
}

// epochSourceFunc yields the i-th epoch to run and, in trainer mode, the
// ranks that asked for it; ok is false when there are no more.
type epochSourceFunc func(ctx context.Context, i int) (num uint64, req *epochReq, ok bool)

// epochSource is Config.Epochs epochs from FirstEpoch, or in trainer mode
// whatever the local ranks ask for until ctx ends: it then reads the
// catalog, listens on the trainer socket and serves the trainers until
// stop is called.
func (a *Agent) epochSource(ctx context.Context) (epochSourceFunc, func(), error) {
	if a.cfg.Trainer.Socket == "" {
		return func(_ context.Context, i int) (uint64, *epochReq, bool) {
			return a.cfg.FirstEpoch + uint64(i), nil, i < a.cfg.Epochs
		}, func() {}, nil
	}
	if _, _, err := a.storage(ctx); err != nil {
		return nil, nil, err
	}
	hub, err := newTrainerHub(a, a.Catalog())
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	a.hub = hub
	a.mu.Unlock()
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.serve(hctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	return func(ctx context.Context, _ int) (uint64, *epochReq, bool) {
		req, err := hub.next(ctx)
		if err != nil {
			return 0, nil, false
		}
		return req.epoch, req, true
	}, stop, nil
}

// trainerFailed tells the ranks of a failed trainer epoch why, and reports
// whether the agent should go on serving (trainer mode, not stopped).
func (a *Agent) trainerFailed(ctx context.Context, req *epochReq, err error) bool {
	if req == nil || ctx.Err() != nil {
		return false
	}
	code := handoff.CodeFailed
	if errors.Is(err, ErrTrainer) {
		code = handoff.CodePeerLost
	}
	a.log.Error().Err(err).Uint64("epoch", req.epoch).Msg("trainer epoch failed; serving on")
	for _, c := range req.conns {
		c.sendError(code, fmt.Sprintf("epoch %d failed at the compute agent: %v", req.epoch, err))
		c.c.Close()
	}
	return true
}

// trainerEpoch is a node epoch's positions: the local ranks' RankOrders
// interleaved (index j of every rank, then j+1), less what a resume
// already consumed.
type trainerEpoch struct {
	order   []uint64
	rank    []int32
	j       []int32
	gpos    []uint64
	rows    int   // per rank per epoch
	batches int   // per rank per epoch
	first   []int // per local rank: the batch it starts at
}

func (a *Agent) trainerOrder(req *epochReq, cat *Catalog) (*trainerEpoch, error) {
	cfg := &a.cfg
	m := epoch.RankSamples(req.world, cat.Total, cfg.Batch, cfg.Trainer.DropLast)
	nb := epoch.RankBatches(req.world, cat.Total, cfg.Batch, cfg.Trainer.DropLast)
	first, consumed, err := checkResume(req, cfg.StrictOrder, m, nb, cfg.Batch)
	if err != nil {
		for _, c := range req.conns {
			c.sendError(handoff.CodeEpoch, err.Error())
			c.c.Close()
		}
		return nil, fmt.Errorf("%w: epoch %d: %v", ErrTrainer, req.epoch, err)
	}
	te := &trainerEpoch{rows: m, batches: nb, first: first}
	orders := make([][]uint64, len(req.conns))
	for lr := range req.conns {
		orders[lr] = epoch.RankOrder(cfg.Seed, req.epoch, req.base+lr, req.world, cat.Total, cfg.Batch, cfg.Trainer.DropLast)
	}
	for j := range m {
		for lr, o := range orders {
			g := uint64(j)*uint64(req.world) + uint64(req.base+lr)
			switch {
			case cfg.StrictOrder && j < first[lr]*cfg.Batch:
				continue
			case consumed != nil && consumed[g>>3]&(1<<(g&7)) != 0:
				continue
			}
			te.order = append(te.order, o[j])
			te.rank = append(te.rank, int32(lr))
			te.j = append(te.j, int32(j))
			te.gpos = append(te.gpos, g)
		}
	}
	return te, nil
}
