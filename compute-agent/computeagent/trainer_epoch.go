package computeagent

import (
	"context"
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
)

// trainerDType is the slots' dtype.
func (a *Agent) trainerDType() string {
	if a.cfg.Trainer.DType == "" {
		return "uint8"
	}
	return a.cfg.Trainer.DType
}

// hubConfig is the trainer hub's configuration for catalog cat.
func (a *Agent) hubConfig(cat *catalog.Catalog) trainer.HubConfig {
	cfg := &a.cfg
	return trainer.HubConfig{
		Socket: cfg.Trainer.Socket, Slots: cfg.Trainer.Slots, RingBytes: cfg.Trainer.RingBytes, DropLast: cfg.Trainer.DropLast,
		DType: a.trainerDType(), Batch: cfg.Batch, StrictOrder: cfg.StrictOrder, Name: cfg.Name, Version: cfg.Version, Seed: cfg.Seed,
		Pipeline: cfg.Pipeline, PipelineID: a.pipeID, Tail: a.tail, Fingerprint: cat.Fingerprint, Samples: cat.Total, Log: a.log, Warnings: a.peer,
	}
}

// epochSourceFunc yields the i-th epoch to run and, in trainer mode, the
// ranks that asked for it; ok is false when there are no more.
type epochSourceFunc func(ctx context.Context, i int) (num uint64, req *trainer.EpochReq, ok bool)

// epochSource is Config.Epochs epochs from FirstEpoch, or in trainer mode
// whatever the local ranks ask for until ctx ends: it then reads the
// catalog, listens on the trainer socket and serves the trainers until
// stop is called.
func (a *Agent) epochSource(ctx context.Context) (epochSourceFunc, func(), error) {
	if a.cfg.Trainer.Socket == "" {
		return func(_ context.Context, i int) (uint64, *trainer.EpochReq, bool) {
			return a.cfg.FirstEpoch + uint64(i), nil, i < a.cfg.Epochs
		}, func() {}, nil
	}
	if _, _, err := a.storage(ctx, nil); err != nil {
		return nil, nil, err
	}
	hub, err := trainer.NewHub(a.hubConfig(a.Catalog()))
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
		hub.Serve(hctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	return func(ctx context.Context, _ int) (uint64, *trainer.EpochReq, bool) {
		req, err := hub.Next(ctx)
		if err != nil {
			return 0, nil, false
		}
		return req.Epoch, req, true
	}, stop, nil
}

// trainerFailed tells the ranks of a failed trainer epoch why, and reports
// whether the agent should go on serving (trainer mode, not stopped).
func (a *Agent) trainerFailed(ctx context.Context, req *trainer.EpochReq, err error) bool {
	if req == nil || ctx.Err() != nil {
		return false
	}
	code := handoff.CodeFailed
	if errors.Is(err, trainer.ErrTrainer) {
		code = handoff.CodePeerLost
	}
	a.log.Error().Err(err).Uint64("epoch", req.Epoch).Msg("trainer epoch failed; serving on")
	for _, c := range req.Conns {
		c.SendError(code, fmt.Sprintf("epoch %d failed at the compute agent: %v", req.Epoch, err))
		c.Close()
	}
	return true
}
