package trainer

import (
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
)

// Positions is a node epoch's positions: the local ranks' RankOrders
// interleaved (index j of every rank, then j+1), less what a resume
// already consumed.
type Positions struct {
	Order []uint64 // position -> sample
	// By position: the local rank and index whose order holds it, and its
	// global position.
	Rank    []int32
	J       []int32
	GPos    []uint64
	Rows    int   // per rank per epoch
	Batches int   // per rank per epoch
	First   []int // per local rank: the batch it starts at
}

// Positions lays out the epoch req asks for, over a catalog of total
// samples in batches of batch (seed, dropLast and strict as the agent
// serves). A resume state that does not fit the epoch is refused: the
// ranks are told (ERROR EPOCH) and disconnected.
func (req *EpochReq) Positions(seed, total uint64, batch int, dropLast, strict bool) (*Positions, error) {
	m := schedule.RankSamples(req.World, total, batch, dropLast)
	nb := schedule.RankBatches(req.World, total, batch, dropLast)
	first, consumed, err := checkResume(req, strict, m, nb, batch)
	if err != nil {
		for _, c := range req.Conns {
			c.SendError(handoff.CodeEpoch, err.Error())
			c.Close()
		}
		return nil, fmt.Errorf("%w: epoch %d: %v", ErrTrainer, req.Epoch, err)
	}
	te := &Positions{Rows: m, Batches: nb, First: first}
	orders := make([][]uint64, len(req.Conns))
	for lr := range req.Conns {
		orders[lr] = schedule.RankOrder(seed, req.Epoch, req.Base+lr, req.World, total, batch, dropLast)
	}
	for j := range m {
		for lr, o := range orders {
			g := uint64(j)*uint64(req.World) + uint64(req.Base+lr)
			switch {
			case strict && j < first[lr]*batch:
				continue
			case consumed != nil && consumed[g>>3]&(1<<(g&7)) != 0:
				continue
			}
			te.Order = append(te.Order, o[j])
			te.Rank = append(te.Rank, int32(lr))
			te.J = append(te.J, int32(j))
			te.GPos = append(te.GPos, g)
		}
	}
	return te, nil
}
