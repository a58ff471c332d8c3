// Package batch forms the batches an in-process GPU consumer takes from
// an epoch's finished samples (Stacker): B samples of one shape stacked
// into one float32 buffer laid out [B, C, H, W], with their labels and,
// per row, what the sample log and the report keep (the row's hash, RowSHA,
// its split and wire bytes); in completion order, or in strict order
// through a reorder buffer. It is the consumer's counterpart of the
// trainer's Assembler (package trainer), which places the samples into
// the rows of shared-memory slots instead.
package batch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
)

// Batch is what the GPU consumer receives: B samples stacked into one
// float32 buffer laid out [B, C, H, W], with their labels.
type Batch struct {
	Epoch uint64
	// Index counts the epoch's batches from 0.
	Index int
	// Samples and Labels are per row.
	Samples []uint64
	Labels  []uint32
	// Shape is [B, C, H, W].
	Shape [4]int
	Data  []float32

	// Per row, for the sample log and the report: the row's hash
	// (schedule.Item.SHA), the split it arrived at and its wire bytes.
	SHAs   [][32]byte
	Splits []int
	Wire   []int64
}

// Len is the number of samples in the batch.
func (b *Batch) Len() int { return len(b.Samples) }

// Stacker forms one epoch's batches of Size samples and hands each on
// Out once full, the last one when the epoch closes. Failed items take
// no row. Strict, it stacks the items by position: each as soon as every
// earlier position came (Next), holding the later ones meanwhile.
type Stacker struct {
	Epoch  uint64
	Size   int
	Strict bool
	Out    chan<- *Batch

	cur    *Batch // the batch being formed; nil between batches
	formed int    // batches begun
	buf    map[int]schedule.Item
	next   int
}

// Next is the first position not yet stacked (Strict; 0 otherwise).
func (s *Stacker) Next() int { return s.next }

// Add takes a finished item, stacking it now or, strict, once every
// earlier position came. It waits on ctx for Out to take a full batch.
func (s *Stacker) Add(ctx context.Context, it schedule.Item) error {
	if !s.Strict {
		if it.Failed {
			return nil
		}
		return s.stack(ctx, it)
	}
	if s.buf == nil {
		s.buf = map[int]schedule.Item{}
	}
	s.buf[it.Pos] = it
	for {
		it, ok := s.buf[s.next]
		if !ok {
			return nil
		}
		delete(s.buf, s.next)
		s.next++
		if !it.Failed {
			if err := s.stack(ctx, it); err != nil {
				return err
			}
		}
	}
}

// Close hands on the last batch, once the epoch's items all came; it
// fails when the reorder buffer still holds items behind a missing one.
func (s *Stacker) Close(ctx context.Context) error {
	if len(s.buf) > 0 {
		return fmt.Errorf("batch: epoch %d: %d samples stuck behind position %d", s.Epoch, len(s.buf), s.next)
	}
	if s.cur != nil {
		return s.emit(ctx)
	}
	return nil
}

// emit hands the current batch on.
func (s *Stacker) emit(ctx context.Context) error {
	b := s.cur
	s.cur = nil
	n := b.Len()
	b.Shape[0] = n
	b.Data = b.Data[:n*b.Shape[1]*b.Shape[2]*b.Shape[3]]
	select {
	case s.Out <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stack stacks it onto the current batch, emitting the batch once full.
func (s *Stacker) stack(ctx context.Context, it schedule.Item) error {
	t := it.Tensor
	if t == nil { // FetchOnly: rows without data
		t = &ops.Tensor{}
	}
	if s.cur == nil {
		s.cur = &Batch{Epoch: s.Epoch, Index: s.formed, Shape: [4]int{0, t.C, t.H, t.W},
			Data: make([]float32, 0, s.Size*len(t.Data))}
		s.formed++
	}
	cur := s.cur
	if t.C != cur.Shape[1] || t.H != cur.Shape[2] || t.W != cur.Shape[3] {
		return fmt.Errorf("batch: epoch %d: sample %d has shape [%d %d %d], its batch [%d %d %d]",
			s.Epoch, it.Sample, t.C, t.H, t.W, cur.Shape[1], cur.Shape[2], cur.Shape[3])
	}
	cur.Samples = append(cur.Samples, it.Sample)
	cur.Labels = append(cur.Labels, it.Label)
	cur.Data = append(cur.Data, t.Data...)
	cur.SHAs = append(cur.SHAs, it.SHA)
	cur.Splits = append(cur.Splits, it.Split)
	cur.Wire = append(cur.Wire, it.Wire)
	if cur.Len() == s.Size {
		return s.emit(ctx)
	}
	return nil
}

var hostLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// RowSHA is a row's hash as the sample log keeps it: the sha256 of t's
// float32 values, little-endian.
func RowSHA(t *ops.Tensor) [32]byte {
	if hostLE {
		return sha256.Sum256(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.Data))), len(t.Data)*4))
	}
	b := make([]byte, 4*len(t.Data))
	for i, f := range t.Data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return sha256.Sum256(b)
}
