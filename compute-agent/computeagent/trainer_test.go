package computeagent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testTrainer is a trainer rank speaking docs/handoff.md, for tests.
type testTrainer struct {
	c       *net.UnixConn
	fr      *frameReader
	w       welcomeMsg
	mem     []byte
	delay   time.Duration // per batch, after reading it
	stopAt  int           // close the connection after this many batches (0: never)
	rows    []trainerRow
	batches int
	hdr     [5 + releaseLen]byte
}

type trainerRow struct {
	epoch, sample, pos uint64
	batch              int
	sha                [32]byte
	row                []byte
}

func dialTrainer(t testing.TB, path string, hello helloMsg) (*testTrainer, error) {
	t.Helper()
	var c net.Conn
	var err error
	for range 200 {
		if c, err = net.Dial("unix", path); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	hello.Protocol = max(hello.Protocol, handoffProtocol)
	if _, err := uc.Write(jsonFrame(frameHello, hello)); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	if n < 5 {
		return nil, fmt.Errorf("short frame")
	}
	if buf[4] == frameError {
		var m errorMsg
		json.Unmarshal(buf[5:n], &m)
		return nil, fmt.Errorf("%s: %s", m.Code, m.Message)
	}
	tt := &testTrainer{c: uc, fr: &frameReader{r: uc}}
	if err := json.Unmarshal(buf[5:n], &tt.w); err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no fd: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil, err
	}
	tt.mem, err = unix.Mmap(fds[0], 0, tt.w.Slots*tt.w.SlotBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { unix.Munmap(tt.mem); uc.Close() })
	return tt, nil
}

// epoch asks for an epoch and consumes it, returning the batch count.
func (tt *testTrainer) epoch(e uint64, resume *resumeMsg) error {
	if _, err := tt.c.Write(jsonFrame(frameEpoch, epochMsg{Epoch: &e, Resume: resume})); err != nil {
		return err
	}
	for {
		typ, p, err := tt.fr.next()
		if err != nil {
			return err
		}
		switch typ {
		case frameStatus:
			continue
		case frameError:
			return fmt.Errorf("agent error: %s", p)
		case frameEnd:
			return nil
		case frameReady:
		default:
			return fmt.Errorf("unexpected frame %#x", typ)
		}
		slot := int(binary.LittleEndian.Uint32(p))
		rows := int(binary.LittleEndian.Uint32(p[4:]))
		batch := int(binary.LittleEndian.Uint64(p[16:]))
		s := tt.mem[slot*tt.w.SlotBytes : (slot+1)*tt.w.SlotBytes]
		if binary.LittleEndian.Uint32(s) != slotMagic || int(binary.LittleEndian.Uint32(s[8:])) != rows {
			return fmt.Errorf("bad slot header")
		}
		rb := len(s) // row bytes from the header's shape
		rb = int(binary.LittleEndian.Uint32(s[20:])) * int(binary.LittleEndian.Uint32(s[24:])) * int(binary.LittleEndian.Uint32(s[28:]))
		if s[6] == dtypeFloat32 {
			rb *= 4
		}
		ids, pos := int(binary.LittleEndian.Uint64(s[64:])), int(binary.LittleEndian.Uint64(s[72:]))
		for j := range rows {
			row := s[slotHeaderSize+j*rb : slotHeaderSize+(j+1)*rb]
			tt.rows = append(tt.rows, trainerRow{epoch: e, batch: batch,
				sample: binary.LittleEndian.Uint64(s[ids+8*j:]), pos: binary.LittleEndian.Uint64(s[pos+8*j:]),
				sha: sha256.Sum256(row), row: slices.Clone(row)})
		}
		tt.batches++
		time.Sleep(tt.delay)
		if tt.stopAt > 0 && tt.batches == tt.stopAt {
			tt.c.Close()
			return errStopped
		}
		binary.LittleEndian.PutUint32(tt.hdr[:], 1+releaseLen)
		tt.hdr[4] = frameRelease
		binary.LittleEndian.PutUint32(tt.hdr[5:], uint32(slot))
		if _, err := tt.c.Write(tt.hdr[:]); err != nil {
			return err
		}
	}
}

var errStopped = errors.New("trainer stopped")

// startTrainerAgent runs an agent in trainer mode over the fake storage.
func startTrainerAgent(t *testing.T, mod func(*Config)) string {
	t.Helper()
	n := &memNet{}
	fake := newFake(t, "s1")
	cfg, _ := testConfig(t, n, "s1")
	cfg.Trainer = TrainerConfig{Socket: filepath.Join(t.TempDir(), "t.sock")}
	cfg.Logger = testLogger(t)
	if mod != nil {
		mod(&cfg)
	}
	if cfg.Trainer.DType != "float32" { // the fake storage runs only its own pipeline
		p, _, err := cutTail(cfg.Pipeline)
		if err != nil {
			t.Fatal(err)
		}
		fake.p = p
	}
	n.serve(t, "s1", fake)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := a.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		a.Close()
		if _, err := os.Stat(cfg.Trainer.Socket); err == nil {
			t.Errorf("socket %s left behind", cfg.Trainer.Socket)
		}
	})
	return cfg.Trainer.Socket
}

// runRanks connects local ranks 0..n-1 of world n and runs epoch e on each.
func runRanks(t *testing.T, path string, n int, e uint64, prep func(lr int, tt *testTrainer)) []*testTrainer {
	t.Helper()
	ts := make([]*testTrainer, n)
	for lr := range n {
		tt, err := dialTrainer(t, path, helloMsg{Rank: lr, World: n, LocalRank: lr, LocalWorld: n})
		if err != nil {
			t.Fatal(err)
		}
		if prep != nil {
			prep(lr, tt)
		}
		ts[lr] = tt
	}
	var wg sync.WaitGroup
	for _, tt := range ts {
		wg.Go(func() {
			if err := tt.epoch(e, nil); err != nil && !errors.Is(err, errStopped) {
				t.Errorf("epoch: %v", err)
			}
		})
	}
	wg.Wait()
	return ts
}

func TestTrainerEveryRankOnceEqualBatches(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			path := startTrainerAgent(t, func(c *Config) { c.StrictOrder = strict; c.Batch = 5 })
			ts := runRanks(t, path, 3, 2, nil)
			seen := map[uint64]int{}
			for lr, tt := range ts {
				if tt.batches != tt.w.BatchesPerEpoch {
					t.Errorf("rank %d: %d batches, want %d", lr, tt.batches, tt.w.BatchesPerEpoch)
				}
				var got []uint64
				for _, r := range tt.rows {
					seen[r.pos]++
					got = append(got, r.sample)
				}
				if strict {
					want := RankOrder(7, 2, lr, 3, testSamples, 5, false)
					if !slices.Equal(got, want) {
						t.Errorf("rank %d strict order: got %v, want %v", lr, got, want)
					}
				}
			}
			// 64 samples over 3 ranks: padded to 22 each, 66 positions.
			if len(seen) != 66 {
				t.Errorf("%d positions delivered, want 66", len(seen))
			}
			for p, c := range seen {
				if c != 1 {
					t.Errorf("position %d delivered %d times", p, c)
				}
			}
		})
	}
}

func TestRankOrderEqualCounts(t *testing.T) {
	for _, drop := range []bool{false, true} {
		var counts []int
		ids := map[uint64]int{}
		for r := range 3 {
			o := RankOrder(1, 0, r, 3, 1001, 32, drop)
			counts = append(counts, (len(o)+31)/32)
			for _, s := range o {
				ids[s]++
			}
		}
		if counts[0] != counts[1] || counts[1] != counts[2] {
			t.Errorf("drop_last=%v: batches per rank %v", drop, counts)
		}
		want := 11
		if drop {
			want = 10
		}
		if counts[0] != want || RankBatches(3, 1001, 32, drop) != want {
			t.Errorf("drop_last=%v: %d batches, want %d", drop, counts[0], want)
		}
		if !drop && len(ids) != 1001 {
			t.Errorf("padded epoch covers %d samples, want all 1001", len(ids))
		}
	}
}

func TestTrainerSlowRankDoesNotStallOthers(t *testing.T) {
	path := startTrainerAgent(t, func(c *Config) { c.Batch = 4 })
	var mu sync.Mutex
	var fastDone, slowBatchesAtFastDone int
	ts := make([]*testTrainer, 4)
	for lr := range 4 {
		tt, err := dialTrainer(t, path, helloMsg{Rank: lr, World: 4, LocalRank: lr, LocalWorld: 4})
		if err != nil {
			t.Fatal(err)
		}
		if lr == 3 {
			tt.delay = 100 * time.Millisecond
		}
		ts[lr] = tt
	}
	var wg sync.WaitGroup
	for lr, tt := range ts {
		wg.Go(func() {
			if err := tt.epoch(0, nil); err != nil {
				t.Errorf("rank %d: %v", lr, err)
			}
			mu.Lock()
			if lr != 3 {
				fastDone++
				if fastDone == 3 {
					slowBatchesAtFastDone = ts[3].batches
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	// 16 batches of 100 ms for the slow rank; the fast ones must not wait
	// for it.
	if slowBatchesAtFastDone > ts[3].w.BatchesPerEpoch/2 {
		t.Errorf("fast ranks finished only after the slow one consumed %d of %d batches", slowBatchesAtFastDone, ts[3].w.BatchesPerEpoch)
	}
	seen := map[uint64]bool{}
	for _, tt := range ts {
		for _, r := range tt.rows {
			if seen[r.pos] {
				t.Errorf("position %d twice", r.pos)
			}
			seen[r.pos] = true
		}
	}
	if len(seen) != testSamples {
		t.Errorf("%d positions, want %d", len(seen), testSamples)
	}
}
