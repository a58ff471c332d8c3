// Package trainer is the compute agent's side of the trainer hand-off
// (docs/handoff.md): the Hub that accepts the node's trainer processes on
// a Unix socket and gives each rank a ring of batch slots, and the
// Assembler that places an epoch's finished samples into rows of those
// slots and publishes full batches to their ranks.
package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"math/bits"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/ops"
)

const (
	helloTimeout   = 10 * time.Second
	statusInterval = 5 * time.Second
)

// ErrTrainer marks a failure of the trainer hand-off.
var ErrTrainer = errors.New("trainer: hand-off failed")

// Hub accepts trainer connections and starts an epoch when every
// local rank asked for it.
type Hub struct {
	cfg    HubConfig
	log    zerolog.Logger
	lis    *net.UnixListener
	tmpl   handoff.WelcomeMsg // the fields every rank shares
	layout handoff.SlotLayout

	mu                      sync.Mutex
	sig                     chan struct{}
	conns                   map[int]*Conn // by local rank
	world, localWorld, base int
	asm                     *Assembler // the running epoch's; nil between epochs
}

// Conn is one connected rank.
type Conn struct {
	h     *Hub
	c     *net.UnixConn
	hello handoff.HelloMsg
	ring  *handoff.Ring
	wmu   sync.Mutex
	ready [5 + handoff.ReadyLen]byte

	// Guarded by h.mu.
	want   *handoff.EpochMsg
	closed bool
	// wantAt is when want arrived.
	wantAt time.Time
}

// EpochReq is an epoch every local rank asked for.
type EpochReq struct {
	Epoch  uint64
	World  int
	Base   int // global rank of local rank 0
	Conns  []*Conn
	Resume []*handoff.ResumeMsg
	// Asked is when the last of the local ranks asked for the epoch (Unix
	// ns): the epoch could not start before.
	Asked int64
}

// rowShape runs the pipeline on a small synthetic JPEG to learn the shape
// its output has (a trainer pipeline must give every sample one shape).
func rowShape(p *ops.Pipeline) ([3]int, error) {
	img := image.NewGray(image.Rect(0, 0, 64, 48))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, img, nil); err != nil {
		return [3]int{}, err
	}
	v, err := p.Run(ops.Key{}, ops.Encoded(jpg.Bytes()), 0, p.Len())
	if err != nil {
		return [3]int{}, fmt.Errorf("%w: probing the pipeline's output shape: %v", ErrTrainer, err)
	}
	switch v := v.(type) {
	case *ops.Image:
		return [3]int{v.H, v.W, ops.Channels}, nil
	case *ops.Tensor:
		return [3]int{v.C, v.H, v.W}, nil
	}
	return [3]int{}, fmt.Errorf("%w: pipeline ends in %s", ErrTrainer, v.Kind())
}

// HubConfig is what a Hub serves: the agent's settings that the trainers
// must agree with, and the dataset.
type HubConfig struct {
	Socket      string // the Unix socket's path (Config.Trainer.Socket)
	Slots       int    // slots per rank (Config.Trainer.Slots)
	RingBytes   int64  // all ranks' rings together at most (Config.Trainer.RingBytes)
	DropLast    bool
	DType       string // the slots' dtype: uint8 or float32
	Batch       int
	StrictOrder bool
	Name        string // the agent's
	Version     string
	Seed        uint64
	// Pipeline is what the agent runs (without Tail), PipelineID its ID.
	Pipeline   *ops.Pipeline
	PipelineID string
	// Tail is what the trainers finish on their device (uint8 slots);
	// nil otherwise.
	Tail        *Tail
	Fingerprint string // the dataset's
	Samples     uint64 // in the catalog
	Log         zerolog.Logger
	// Warnings rate-limits and counts the warnings a trainer connection
	// causes (no HELLO, a refused HELLO, a bad frame): whoever can reach
	// the socket can connect as fast as they like. Nil logs every one.
	Warnings *peerlog.Limiter
}

// NewHub listens on the socket, replacing a stale socket file (one
// nobody accepts on).
func NewHub(cfg HubConfig) (*Hub, error) {
	shape, err := rowShape(cfg.Pipeline)
	if err != nil {
		return nil, err
	}
	dtype, layout := uint8(handoff.DTypeUint8), uint8(handoff.LayoutNHWC)
	if cfg.DType == "float32" {
		dtype, layout = handoff.DTypeFloat32, handoff.LayoutNCHW
	}
	path := cfg.Socket
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: another agent serves %s", ErrTrainer, path)
		}
		os.Remove(path)
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w: listen: %v", ErrTrainer, err)
	}
	h := &Hub{
		cfg: cfg, log: cfg.Log.With().Str("socket", path).Logger(), lis: lis,
		layout: handoff.NewSlotLayout(cfg.Batch, shape, dtype, layout),
		sig:    make(chan struct{}), conns: map[int]*Conn{},
	}
	h.tmpl = handoff.WelcomeMsg{
		Protocol: handoff.Protocol, Agent: cfg.Name, Version: cfg.Version,
		Fingerprint: cfg.Fingerprint, Pipeline: cfg.PipelineID, Samples: cfg.Samples, Seed: cfg.Seed,
		BatchSize: cfg.Batch, DropLast: cfg.DropLast, StrictOrder: cfg.StrictOrder,
		DType: cfg.DType, Layout: "NHWC", RowShape: shape, HeaderBytes: handoff.SlotHeaderSize,
		SlotBytes: h.layout.SlotBytes,
	}
	if layout == handoff.LayoutNCHW {
		h.tmpl.Layout = "NCHW"
	}
	if cfg.Tail != nil {
		h.tmpl.ToTensor = true
		if cfg.Tail.Normalize != nil {
			h.tmpl.Normalize = &handoff.NormalizeMsg{Mean: cfg.Tail.Normalize.Mean, Std: cfg.Tail.Normalize.Std}
		}
	}
	return h, nil
}

// Serve accepts trainers until ctx ends, then closes every connection and
// the socket, and waits for its goroutines.
func (h *Hub) Serve(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-ctx.Done()
		h.lis.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			c.c.Close()
		}
		h.mu.Unlock()
	})
	h.log.Info().Int("slot_bytes", h.layout.SlotBytes).Str("dtype", h.tmpl.DType).Msg("serving trainers")
	for {
		c, err := h.lis.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error().Err(err).Msg("accepting trainers")
			}
			return
		}
		wg.Go(func() { h.handle(ctx, c) })
	}
}

// handle runs one trainer connection.
func (h *Hub) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	fr := handoff.NewFrameReader(c)
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	typ, p, err := fr.Next()
	if err != nil {
		h.cfg.Warnings.Warn(h.log, peerlog.TrainerRefused).Err(err).Msg("trainer sent no HELLO")
		return
	}
	m, err := handoff.DecodeClientFrame(typ, p)
	if err == nil && m.Hello == nil {
		err = fmt.Errorf("%w: first frame is %#x, want HELLO", handoff.ErrFrame, typ)
	}
	if err != nil {
		sendError(c, handoff.CodeBadFrame, err.Error())
		return
	}
	tc, code, err := h.register(c, *m.Hello)
	if err != nil {
		h.cfg.Warnings.Warn(h.log, peerlog.TrainerRefused).Err(err).Int("rank", m.Hello.Rank).Msg("trainer refused")
		sendError(c, code, err.Error())
		return
	}
	defer h.unregister(tc)
	c.SetReadDeadline(time.Time{})
	h.log.Info().Int("rank", tc.hello.Rank).Int("local_rank", tc.hello.LocalRank).Int("pid", tc.hello.PID).
		Int("slots", tc.ring.Slots).Msg("trainer connected")
	for {
		typ, p, err := fr.Next()
		if err != nil {
			if ctx.Err() == nil {
				h.log.Info().Err(err).Int("rank", tc.hello.Rank).Msg("trainer disconnected")
			}
			return
		}
		m, err := handoff.DecodeClientFrame(typ, p)
		if err == nil && m.Hello != nil {
			err = fmt.Errorf("%w: second HELLO", handoff.ErrFrame)
		}
		if err != nil {
			h.cfg.Warnings.Warn(h.log, peerlog.TrainerRefused).Err(err).Int("rank", tc.hello.Rank).Msg("bad frame from trainer")
			tc.SendError(handoff.CodeBadFrame, err.Error())
			return
		}
		if m.Release.OK {
			if err := h.release(tc, m.Release.Slot, m.Release.WaitNS); err != nil {
				tc.SendError(handoff.CodeBadFrame, err.Error())
				return
			}
			continue
		}
		h.mu.Lock()
		tc.want, tc.wantAt = m.Epoch, time.Now()
		h.broadcastLocked()
		h.mu.Unlock()
	}
}

// register checks a HELLO against the agent and the other local ranks,
// makes the rank's ring and sends WELCOME with its file descriptor.
func (h *Hub) register(c *net.UnixConn, hello handoff.HelloMsg) (*Conn, string, error) {
	cfg := &h.cfg
	t := &h.tmpl
	if hello.Protocol != handoff.Protocol {
		return nil, handoff.CodeVersion, fmt.Errorf("%w: client speaks protocol %d, this agent %d", ErrTrainer, hello.Protocol, handoff.Protocol)
	}
	if hello.Fingerprint != "" && hello.Fingerprint != t.Fingerprint {
		return nil, handoff.CodeDataset, fmt.Errorf("%w: trainer expects dataset %q, the agent serves %q", ErrTrainer, hello.Fingerprint, t.Fingerprint)
	}
	switch {
	case hello.BatchSize != 0 && hello.BatchSize != cfg.Batch:
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: trainer asks batch size %d, the agent serves %d (--batch)", ErrTrainer, hello.BatchSize, cfg.Batch)
	case hello.DropLast != nil && *hello.DropLast != cfg.DropLast:
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: trainer asks drop_last=%v, the agent serves %v (--drop-last)", ErrTrainer, *hello.DropLast, cfg.DropLast)
	case hello.StrictOrder != nil && *hello.StrictOrder != cfg.StrictOrder:
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: trainer asks strict_order=%v, the agent serves %v (--strict-order)", ErrTrainer, *hello.StrictOrder, cfg.StrictOrder)
	case hello.DType != "" && hello.DType != t.DType:
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: trainer asks dtype %s, the agent serves %s (--dtype)", ErrTrainer, hello.DType, t.DType)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	base := hello.Rank - hello.LocalRank
	if len(h.conns) > 0 && (hello.World != h.world || hello.LocalWorld != h.localWorld || base != h.base) {
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: rank %d says world %d, local world %d, first local rank %d; connected ranks say %d, %d, %d",
			ErrTrainer, hello.Rank, hello.World, hello.LocalWorld, base, h.world, h.localWorld, h.base)
	}
	if h.conns[hello.LocalRank] != nil {
		return nil, handoff.CodeDuplicateRank, fmt.Errorf("%w: local rank %d is already connected", ErrTrainer, hello.LocalRank)
	}
	if h.asm != nil {
		return nil, handoff.CodeEpoch, fmt.Errorf("%w: an epoch is running for the other local ranks", ErrTrainer)
	}
	slots := cfg.Slots
	if fit := int(cfg.RingBytes / int64(hello.LocalWorld*h.layout.SlotBytes)); fit < slots {
		slots = fit
	}
	if slots < 1 {
		return nil, handoff.CodeMismatch, fmt.Errorf("%w: one slot of %d bytes per rank for %d local ranks exceeds the ring budget of %d bytes (--ring-bytes)",
			ErrTrainer, h.layout.SlotBytes, hello.LocalWorld, cfg.RingBytes)
	}
	r, err := handoff.NewRing(fmt.Sprintf("sophon-rank%d", hello.Rank), slots, h.layout)
	if err != nil {
		return nil, handoff.CodeFailed, err
	}
	w := *t
	w.Rank, w.World, w.LocalRank, w.LocalWorld = hello.Rank, hello.World, hello.LocalRank, hello.LocalWorld
	w.Slots = slots
	w.RowsPerEpoch = schedule.RankSamples(hello.World, t.Samples, cfg.Batch, cfg.DropLast)
	w.BatchesPerEpoch = schedule.RankBatches(hello.World, t.Samples, cfg.Batch, cfg.DropLast)
	w.PositionsPerEpoch = w.RowsPerEpoch * hello.World
	if _, _, err := c.WriteMsgUnix(handoff.JSONFrame(handoff.FrameWelcome, w), unix.UnixRights(r.FD), nil); err != nil {
		r.Close()
		return nil, handoff.CodeFailed, fmt.Errorf("%w: sending WELCOME: %v", ErrTrainer, err)
	}
	tc := &Conn{h: h, c: c, hello: hello, ring: r}
	h.conns[hello.LocalRank] = tc
	h.world, h.localWorld, h.base = hello.World, hello.LocalWorld, base
	h.broadcastLocked()
	return tc, "", nil
}

// unregister drops a rank; a running epoch cannot go on without it.
func (h *Hub) unregister(tc *Conn) {
	h.mu.Lock()
	tc.closed = true
	delete(h.conns, tc.hello.LocalRank)
	asm := h.asm
	h.broadcastLocked()
	h.mu.Unlock()
	if asm != nil && asm.has(tc) {
		asm.Abort(fmt.Errorf("%w: rank %d disconnected during the epoch", ErrTrainer, tc.hello.Rank), handoff.CodePeerLost)
	}
	tc.ring.Close()
}

func (h *Hub) release(tc *Conn, slot int, waitNS int64) error {
	h.mu.Lock()
	asm := h.asm
	h.mu.Unlock()
	if asm == nil || !asm.has(tc) {
		return fmt.Errorf("%w: RELEASE of slot %d outside an epoch", handoff.ErrFrame, slot)
	}
	return asm.Release(tc, slot, waitNS)
}

func (h *Hub) broadcastLocked() {
	close(h.sig)
	h.sig = make(chan struct{})
}

// Next waits until every local rank asked for the same epoch and returns
// it. While it waits it tells the waiting ranks who they wait for.
func (h *Hub) Next(ctx context.Context) (*EpochReq, error) {
	tick := time.NewTicker(statusInterval)
	defer tick.Stop()
	for {
		h.mu.Lock()
		req, waiting, msg := h.readyLocked()
		sig := h.sig
		h.mu.Unlock()
		if req != nil {
			return req, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-sig:
		case <-tick.C:
			for _, c := range waiting {
				c.send(handoff.JSONFrame(handoff.FrameStatus, handoff.StatusMsg{Message: msg}))
			}
		}
	}
}

// readyLocked returns the epoch every local rank asked for, or the ranks
// waiting and why.
func (h *Hub) readyLocked() (*EpochReq, []*Conn, string) {
	var waiting []*Conn
	var missing []int
	for lr := range max(h.localWorld, 1) {
		c := h.conns[lr]
		if c == nil || c.want == nil {
			missing = append(missing, h.base+lr)
			continue
		}
		waiting = append(waiting, c)
	}
	if len(waiting) == 0 {
		return nil, nil, ""
	}
	first := *waiting[0].want.Epoch
	for _, c := range waiting[1:] {
		if e := *c.want.Epoch; e != first {
			msg := fmt.Sprintf("rank %d asked for epoch %d, rank %d for epoch %d; local ranks must run the same epoch (call set_epoch with the same value on every rank)",
				waiting[0].hello.Rank, first, c.hello.Rank, e)
			for _, w := range waiting {
				w.want = nil
				w.SendError(handoff.CodeEpoch, msg)
				w.c.Close()
			}
			return nil, nil, ""
		}
	}
	if len(missing) > 0 {
		return nil, waiting, fmt.Sprintf("epoch %d waits for ranks %v to connect and ask for it", first, missing)
	}
	req := &EpochReq{Epoch: first, World: h.world, Base: h.base}
	for _, c := range waiting {
		req.Asked = max(req.Asked, c.wantAt.UnixNano())
		req.Conns = append(req.Conns, c)
		req.Resume = append(req.Resume, c.want.Resume)
		c.want = nil
	}
	return req, nil, ""
}

// Start marks asm as the running epoch's assembler; finish clears it.
func (h *Hub) Start(asm *Assembler) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range asm.ranks {
		if c.c.closed {
			return fmt.Errorf("%w: rank %d left before the epoch started", ErrTrainer, c.c.hello.Rank)
		}
	}
	h.asm = asm
	return nil
}

func (h *Hub) Finish() {
	h.mu.Lock()
	h.asm = nil
	h.broadcastLocked()
	h.mu.Unlock()
}

// Close closes the connection; the rank then disconnects.
func (tc *Conn) Close() error { return tc.c.Close() }

// send writes one frame.
func (tc *Conn) send(frame []byte) error {
	tc.wmu.Lock()
	defer tc.wmu.Unlock()
	_, err := tc.c.Write(frame)
	return err
}

// sendReady writes READY from the connection's own buffer (no allocation).
func (tc *Conn) sendReady(slot, rows int, epoch, batch uint64) error {
	tc.wmu.Lock()
	defer tc.wmu.Unlock()
	handoff.PutReady(tc.ready[:], slot, rows, epoch, batch)
	_, err := tc.c.Write(tc.ready[:])
	return err
}

func (tc *Conn) SendError(code, msg string) {
	tc.send(handoff.JSONFrame(handoff.FrameError, handoff.ErrorMsg{Code: code, Message: msg}))
}

func sendError(c net.Conn, code, msg string) {
	c.Write(handoff.JSONFrame(handoff.FrameError, handoff.ErrorMsg{Code: code, Message: msg}))
}

// checkResume validates the ranks' resume states for an epoch of m rows
// per rank in nb batches, and returns per local rank the first batch and,
// in completion order, the union of the consumed positions (nil when no
// rank resumes).
func checkResume(req *EpochReq, strict bool, m, nb, batch int) (first []int, consumed []byte, err error) {
	first = make([]int, len(req.Conns))
	bitmapLen := (m*req.World + 7) / 8
	for lr, r := range req.Resume {
		if r == nil {
			continue
		}
		rank := req.Base + lr
		if r.Batches > nb {
			return nil, nil, fmt.Errorf("rank %d resumes after batch %d of %d", rank, r.Batches, nb)
		}
		first[lr] = r.Batches
		if strict {
			if r.Consumed != nil {
				return nil, nil, fmt.Errorf("rank %d sent a completion-order resume state to a strict-order agent", rank)
			}
			continue
		}
		if len(r.Consumed) != bitmapLen {
			return nil, nil, fmt.Errorf("rank %d's resume bitmap has %d bytes, want %d (was it saved with another world size or dataset?)", rank, len(r.Consumed), bitmapLen)
		}
		want := min(r.Batches*batch, m)
		n := 0
		for _, b := range r.Consumed {
			n += bits.OnesCount8(b)
		}
		if n != want {
			return nil, nil, fmt.Errorf("rank %d consumed %d batches but its bitmap holds %d positions, want %d", rank, r.Batches, n, want)
		}
		if consumed == nil {
			consumed = make([]byte, bitmapLen)
		}
		for i, b := range r.Consumed {
			if consumed[i]&b != 0 {
				return nil, nil, fmt.Errorf("rank %d's resume bitmap overlaps another local rank's", rank)
			}
			consumed[i] |= b
		}
	}
	return first, consumed, nil
}
