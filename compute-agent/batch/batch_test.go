package batch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
)

func item(pos int, failed bool) schedule.Item {
	t := &ops.Tensor{C: 1, H: 1, W: 2, Data: []float32{float32(pos), -float32(pos)}}
	return schedule.Item{Pos: pos, Sample: uint64(100 + pos), Label: uint32(pos), Split: pos % 2, Wire: int64(10 * pos), Failed: failed, Tensor: t, SHA: RowSHA(t)}
}

// collect runs items through a stacker and returns the batches' samples.
func collect(t *testing.T, strict bool, items []schedule.Item) ([][]uint64, *Stacker, error) {
	t.Helper()
	out := make(chan *Batch, len(items)+1)
	s := &Stacker{Epoch: 7, Size: 2, Strict: strict, Out: out}
	var err error
	for _, it := range items {
		if err = s.Add(context.Background(), it); err != nil {
			break
		}
	}
	if err == nil {
		err = s.Close(context.Background())
	}
	close(out)
	var got [][]uint64
	for i := 0; ; i++ {
		b, ok := <-out
		if !ok {
			break
		}
		if b.Epoch != 7 || b.Index != i || b.Shape != [4]int{b.Len(), 1, 1, 2} || len(b.Data) != 2*b.Len() ||
			len(b.SHAs) != b.Len() || len(b.Splits) != b.Len() || len(b.Wire) != b.Len() {
			t.Errorf("batch %d: %+v", i, b)
		}
		for j, s := range b.Samples {
			pos := int(s - 100)
			if b.Labels[j] != uint32(pos) || b.Data[2*j] != float32(pos) || b.Splits[j] != pos%2 || b.Wire[j] != int64(10*pos) || b.SHAs[j] != item(pos, false).SHA {
				t.Errorf("batch %d row %d: not sample %d's", i, j, s)
			}
		}
		got = append(got, b.Samples)
	}
	return got, s, err
}

// TestStacker: in completion order items stack as they come; strict,
// by position once every earlier one came; failed items take no row; the
// last batch may be short.
func TestStacker(t *testing.T) {
	items := []schedule.Item{item(2, false), item(0, false), item(1, true), item(4, false), item(3, false)}
	got, _, err := collect(t, false, items)
	if want := [][]uint64{{102, 100}, {104, 103}}; err != nil || !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("completion order: %v, %v; want %v", got, err, want)
	}
	got, s, err := collect(t, true, items)
	if want := [][]uint64{{100, 102}, {103, 104}}; err != nil || !slices.EqualFunc(got, want, slices.Equal) || s.Next() != 5 {
		t.Errorf("strict: %v, %v, next %d; want %v, 5", got, err, s.Next(), want)
	}
	_, s, err = collect(t, true, []schedule.Item{item(1, false), item(2, false)})
	if err == nil || !strings.Contains(err.Error(), "2 samples stuck behind position 0") || s.Next() != 0 {
		t.Errorf("strict with position 0 missing: %v, next %d", err, s.Next())
	}
	odd := item(1, false)
	odd.Tensor = &ops.Tensor{C: 3, H: 1, W: 1, Data: make([]float32, 3)}
	if _, _, err := collect(t, false, []schedule.Item{item(0, false), odd}); err == nil || !strings.Contains(err.Error(), "has shape [3 1 1], its batch [1 1 2]") {
		t.Errorf("a sample of another shape: %v", err)
	}
}

// TestRowSHA: the hash of the float32 values written little-endian.
func TestRowSHA(t *testing.T) {
	data := []float32{1.5, -2, float32(math.Pi), 0}
	b := make([]byte, 0, 16)
	for _, f := range data {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	if got := RowSHA(&ops.Tensor{Data: data}); got != sha256.Sum256(b) {
		t.Errorf("got %x, want %x", got, sha256.Sum256(b))
	}
}
