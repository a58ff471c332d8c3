// Package handoff is the trainer hand-off protocol (docs/handoff.md): the
// length-prefixed frames a compute agent and its node's trainer processes
// exchange on a Unix stream socket, and the ring of batch slots in shared
// memory that carries the batches themselves.
package handoff

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The trainer hand-off protocol (docs/handoff.md): length-prefixed frames
// on a Unix stream socket.
const (
	Protocol = 1

	FrameHello   = 0x01
	FrameWelcome = 0x02
	FrameEpoch   = 0x03
	FrameReady   = 0x04
	FrameRelease = 0x05
	FrameEnd     = 0x06
	FrameError   = 0x07
	FrameStatus  = 0x08

	// MaxFrame bounds a frame's body; longer frames are refused before
	// anything is allocated for them.
	MaxFrame = 16 << 20

	ReadyLen   = 24
	ReleaseLen = 16
)

// ErrFrame marks a malformed frame from a trainer.
var ErrFrame = errors.New("handoff: bad hand-off frame")

// Error codes of ERROR frames.
const (
	CodeVersion       = "VERSION"
	CodeMismatch      = "MISMATCH"
	CodeDataset       = "DATASET"
	CodeDuplicateRank = "DUPLICATE_RANK"
	CodeBadFrame      = "BAD_FRAME"
	CodeEpoch         = "EPOCH"
	CodePeerLost      = "PEER_LOST"
	CodeFailed        = "FAILED"
)

// HelloMsg is a trainer's HELLO. Zero values of the optional fields mean
// "whatever the agent serves".
type HelloMsg struct {
	Protocol    int    `json:"protocol"`
	Client      string `json:"client"`
	PID         int    `json:"pid"`
	Rank        int    `json:"rank"`
	World       int    `json:"world"`
	LocalRank   int    `json:"local_rank"`
	LocalWorld  int    `json:"local_world"`
	BatchSize   int    `json:"batch_size"`
	DropLast    *bool  `json:"drop_last"`
	StrictOrder *bool  `json:"strict_order"`
	DType       string `json:"dtype"`
	Fingerprint string `json:"fingerprint"`
}

// validate checks the ranks' arithmetic.
func (h *HelloMsg) validate() error {
	switch {
	case h.World < 1 || h.Rank < 0 || h.Rank >= h.World:
		return fmt.Errorf("%w: rank %d of world %d", ErrFrame, h.Rank, h.World)
	case h.LocalWorld < 1 || h.LocalRank < 0 || h.LocalRank >= h.LocalWorld:
		return fmt.Errorf("%w: local rank %d of local world %d", ErrFrame, h.LocalRank, h.LocalWorld)
	case h.LocalWorld > h.World || h.Rank < h.LocalRank || h.Rank-h.LocalRank+h.LocalWorld > h.World:
		return fmt.Errorf("%w: local ranks %d..%d do not fit world %d", ErrFrame, h.Rank-h.LocalRank, h.Rank-h.LocalRank+h.LocalWorld-1, h.World)
	case h.BatchSize < 0:
		return fmt.Errorf("%w: batch size %d", ErrFrame, h.BatchSize)
	case h.DType != "" && h.DType != "uint8" && h.DType != "float32":
		return fmt.Errorf("%w: dtype %q: want uint8 or float32", ErrFrame, h.DType)
	}
	return nil
}

// WelcomeMsg is the agent's WELCOME (the ring's fd travels with it).
type WelcomeMsg struct {
	Protocol          int           `json:"protocol"`
	Agent             string        `json:"agent"`
	Version           string        `json:"version"`
	Fingerprint       string        `json:"fingerprint"`
	Pipeline          string        `json:"pipeline"`
	Samples           uint64        `json:"samples"`
	Seed              uint64        `json:"seed"`
	Rank              int           `json:"rank"`
	World             int           `json:"world"`
	LocalRank         int           `json:"local_rank"`
	LocalWorld        int           `json:"local_world"`
	BatchSize         int           `json:"batch_size"`
	DropLast          bool          `json:"drop_last"`
	StrictOrder       bool          `json:"strict_order"`
	DType             string        `json:"dtype"`
	Layout            string        `json:"layout"`
	RowShape          [3]int        `json:"row_shape"`
	Slots             int           `json:"slots"`
	SlotBytes         int           `json:"slot_bytes"`
	HeaderBytes       int           `json:"header_bytes"`
	BatchesPerEpoch   int           `json:"batches_per_epoch"`
	RowsPerEpoch      int           `json:"rows_per_epoch"`
	PositionsPerEpoch int           `json:"positions_per_epoch"`
	ToTensor          bool          `json:"to_tensor"`
	Normalize         *NormalizeMsg `json:"normalize"`
}

type NormalizeMsg struct {
	Mean [3]float32 `json:"mean"`
	Std  [3]float32 `json:"std"`
}

// EpochMsg asks for an epoch, maybe resuming it.
type EpochMsg struct {
	Epoch  *uint64    `json:"epoch"`
	Resume *ResumeMsg `json:"resume"`
}

// ResumeMsg is where a rank stopped: batches consumed and, in completion
// order, the bitmap of the global positions it consumed.
type ResumeMsg struct {
	Batches  int    `json:"batches"`
	Consumed []byte `json:"consumed"` // base64 in JSON
}

type EndMsg struct {
	Epoch   uint64 `json:"epoch"`
	Batches int    `json:"batches"`
	Samples int    `json:"samples"`
}

type ErrorMsg struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type StatusMsg struct {
	Message string `json:"message"`
}

// FrameReader reads frames into one reusable buffer, so steady-state
// reads (RELEASE) allocate nothing.
type FrameReader struct {
	r   io.Reader
	hdr [4]byte
	buf []byte
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

// Next returns the next frame's type and payload, valid until the next
// call. A body longer than maxFrame is refused before it is read.
func (f *FrameReader) Next() (byte, []byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(f.hdr[:])
	if n < 1 || n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes (1 to %d)", ErrFrame, n, MaxFrame)
	}
	if int(n) > cap(f.buf) {
		f.buf = make([]byte, n)
	}
	b := f.buf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// JSONFrame encodes a frame with a JSON payload.
func JSONFrame(typ byte, v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own message types are encoded
	}
	out := make([]byte, 5, 5+len(body))
	binary.LittleEndian.PutUint32(out, uint32(1+len(body)))
	out[4] = typ
	return append(out, body...)
}

// decodeJSON parses a JSON payload strictly: unknown fields and trailing
// data are errors.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if d.More() {
		return fmt.Errorf("%w: data after the JSON object", ErrFrame)
	}
	return nil
}

// PutReady encodes READY into b (5+readyLen bytes).
func PutReady(b []byte, slot, rows int, epoch, batch uint64) {
	le := binary.LittleEndian
	le.PutUint32(b, 1+ReadyLen)
	b[4] = FrameReady
	le.PutUint32(b[5:], uint32(slot))
	le.PutUint32(b[9:], uint32(rows))
	le.PutUint64(b[13:], epoch)
	le.PutUint64(b[21:], batch)
}

// parseRelease decodes RELEASE's payload.
func parseRelease(p []byte) (slot int, waitNS int64, err error) {
	if len(p) != ReleaseLen {
		return 0, 0, fmt.Errorf("%w: RELEASE of %d bytes, want %d", ErrFrame, len(p), ReleaseLen)
	}
	s := binary.LittleEndian.Uint32(p)
	w := binary.LittleEndian.Uint64(p[8:])
	if w > 1<<62 {
		return 0, 0, fmt.Errorf("%w: RELEASE wait %d ns", ErrFrame, w)
	}
	return int(s), int64(w), nil
}

// ClientMsg is a decoded frame from a trainer: exactly one field is set.
type ClientMsg struct {
	Hello   *HelloMsg
	Epoch   *EpochMsg
	Release struct {
		OK     bool
		Slot   int
		WaitNS int64
	}
}

// DecodeClientFrame decodes and checks one frame a trainer sent. The
// fields it returns are bounded: ranks are validated, and a resume bitmap
// is at most maxFrame bytes (its exact length is checked against the
// epoch when the epoch starts).
func DecodeClientFrame(typ byte, p []byte) (ClientMsg, error) {
	var m ClientMsg
	switch typ {
	case FrameHello:
		var h HelloMsg
		if err := decodeJSON(p, &h); err != nil {
			return m, err
		}
		if err := h.validate(); err != nil {
			return m, err
		}
		m.Hello = &h
	case FrameEpoch:
		var e EpochMsg
		if err := decodeJSON(p, &e); err != nil {
			return m, err
		}
		if e.Epoch == nil {
			return m, fmt.Errorf("%w: EPOCH without an epoch", ErrFrame)
		}
		if r := e.Resume; r != nil && r.Batches < 0 {
			return m, fmt.Errorf("%w: resume at batch %d", ErrFrame, r.Batches)
		}
		m.Epoch = &e
	case FrameRelease:
		s, w, err := parseRelease(p)
		if err != nil {
			return m, err
		}
		m.Release.OK, m.Release.Slot, m.Release.WaitNS = true, s, w
	default:
		return m, fmt.Errorf("%w: unexpected frame type %#x from a trainer", ErrFrame, typ)
	}
	return m, nil
}
