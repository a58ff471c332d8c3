package schedule

import "github.com/sophon-dl/sophon/ops"

// Item is one finished sample (or, with Failed set, the place of a bad
// one, which strict order needs to move on), as the finishing workers hand
// it to the batcher or the trainers' assembler.
type Item struct {
	Pos    int    // its position in the epoch's order
	Sample uint64 // its sample id
	Label  uint32
	Split  int         // the split k it arrived at
	Wire   int64       // its wire bytes
	Tensor *ops.Tensor // the finished tensor (nil in trainer mode with uint8 slots, and fetch-only)
	Image  *ops.Image  // trainer mode with uint8 slots
	// SHA is the sha256 of its tensor's float32 values (fetch-only: of
	// its wire form) when Config.OnSample or a journal needs it and no
	// assembler hashes the rows.
	SHA    [32]byte
	Failed bool
	// Trainer mode: the local rank and index whose order holds Pos, and
	// its global position.
	Rank int32
	J    int32
	GPos uint64

	// CPU is the thread CPU time of decoding its wire form and running
	// ops[k:n] here (ns; 0 until finished, and fetch-only).
	CPU int64
}
