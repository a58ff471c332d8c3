package ops_test

import (
	"encoding/binary"
	"math"

	"github.com/sophon-dl/sophon/ops"
)

// valueBytes is a value's exact payload with its dimensions: tensors bit
// for bit.
func valueBytes(v ops.Value) []byte {
	switch v := v.(type) {
	case ops.Encoded:
		return v
	case *ops.Image:
		b := binary.LittleEndian.AppendUint32(nil, uint32(v.W))
		b = binary.LittleEndian.AppendUint32(b, uint32(v.H))
		return append(b, v.Pix...)
	case *ops.Tensor:
		b := make([]byte, 0, 12+4*len(v.Data))
		for _, d := range []int{v.C, v.H, v.W} {
			b = binary.LittleEndian.AppendUint32(b, uint32(d))
		}
		for _, f := range v.Data {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
		return b
	}
	return nil
}

// testedPresets are the presets the exhaustive tests (every split, every
// varied image, several epochs) run: every one but imagenet-train-q90,
// whose ops are imagenet-train-q95's at another quality
// (TestEncodeRoundTrip covers qualities).
func testedPresets() []string {
	var names []string
	for _, n := range ops.PresetNames() {
		if n != "imagenet-train-q90" {
			names = append(names, n)
		}
	}
	return names
}
