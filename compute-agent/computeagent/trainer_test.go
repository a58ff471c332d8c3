package computeagent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
)

// testTrainer is a trainer rank speaking docs/handoff.md, for tests.
type testTrainer struct {
	c       *net.UnixConn
	fr      *handoff.FrameReader
	w       handoff.WelcomeMsg
	mem     []byte
	delay   time.Duration // per batch, after reading it
	stopAt  int           // close the connection after this many batches (0: never)
	rows    []trainerRow
	sizes   []int // rows per batch, in order
	batches int
	taken   atomic.Int64 // batches, readable from other goroutines
	hdr     [5 + handoff.ReleaseLen]byte
}

type trainerRow struct {
	epoch, sample, pos uint64
	batch              int
	sha                [32]byte
	row                []byte
}

func dialTrainer(t testing.TB, path string, hello handoff.HelloMsg) (*testTrainer, error) {
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
	hello.Protocol = max(hello.Protocol, handoff.Protocol)
	if _, err := uc.Write(handoff.JSONFrame(handoff.FrameHello, hello)); err != nil {
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
	if buf[4] == handoff.FrameError {
		var m handoff.ErrorMsg
		json.Unmarshal(buf[5:n], &m)
		return nil, fmt.Errorf("%s: %s", m.Code, m.Message)
	}
	tt := &testTrainer{c: uc, fr: handoff.NewFrameReader(uc)}
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
func (tt *testTrainer) epoch(e uint64, resume *handoff.ResumeMsg) error {
	if _, err := tt.c.Write(handoff.JSONFrame(handoff.FrameEpoch, handoff.EpochMsg{Epoch: &e, Resume: resume})); err != nil {
		return err
	}
	for {
		typ, p, err := tt.fr.Next()
		if err != nil {
			return err
		}
		switch typ {
		case handoff.FrameStatus:
			continue
		case handoff.FrameError:
			return fmt.Errorf("agent error: %s", p)
		case handoff.FrameEnd:
			return nil
		case handoff.FrameReady:
		default:
			return fmt.Errorf("unexpected frame %#x", typ)
		}
		slot := int(binary.LittleEndian.Uint32(p))
		rows := int(binary.LittleEndian.Uint32(p[4:]))
		batch := int(binary.LittleEndian.Uint64(p[16:]))
		s := tt.mem[slot*tt.w.SlotBytes : (slot+1)*tt.w.SlotBytes]
		if binary.LittleEndian.Uint32(s) != handoff.SlotMagic || int(binary.LittleEndian.Uint32(s[8:])) != rows {
			return fmt.Errorf("bad slot header")
		}
		rb := len(s) // row bytes from the header's shape
		rb = int(binary.LittleEndian.Uint32(s[20:])) * int(binary.LittleEndian.Uint32(s[24:])) * int(binary.LittleEndian.Uint32(s[28:]))
		if s[6] == handoff.DTypeFloat32 {
			rb *= 4
		}
		ids, pos := int(binary.LittleEndian.Uint64(s[64:])), int(binary.LittleEndian.Uint64(s[72:]))
		for j := range rows {
			row := s[handoff.SlotHeaderSize+j*rb : handoff.SlotHeaderSize+(j+1)*rb]
			tt.rows = append(tt.rows, trainerRow{epoch: e, batch: batch,
				sample: binary.LittleEndian.Uint64(s[ids+8*j:]), pos: binary.LittleEndian.Uint64(s[pos+8*j:]),
				sha: sha256.Sum256(row), row: slices.Clone(row)})
		}
		tt.sizes = append(tt.sizes, rows)
		tt.batches++
		tt.taken.Add(1)
		time.Sleep(tt.delay)
		if tt.stopAt > 0 && tt.batches == tt.stopAt {
			tt.c.Close()
			return errStopped
		}
		binary.LittleEndian.PutUint32(tt.hdr[:], 1+handoff.ReleaseLen)
		tt.hdr[4] = handoff.FrameRelease
		binary.LittleEndian.PutUint32(tt.hdr[5:], uint32(slot))
		if _, err := tt.c.Write(tt.hdr[:]); err != nil {
			return err
		}
	}
}

var errStopped = errors.New("trainer stopped")

// startTrainerAgent runs an agent in trainer mode over the fake storage.
func startTrainerAgent(t *testing.T, mod func(*Config)) string {
	path, _ := startTrainerAgentA(t, mod)
	return path
}

// startTrainerAgentA is startTrainerAgent that also returns the agent.
func startTrainerAgentA(t testing.TB, mod func(*Config)) (string, *Agent) {
	t.Helper()
	return startTrainerAgentOn(t, enginetest.NewStorage(t, "s1"), mod)
}

// startTrainerAgentOn is startTrainerAgentA over the fake storage fake.
func startTrainerAgentOn(t testing.TB, fake *enginetest.Storage, mod func(*Config)) (string, *Agent) {
	t.Helper()
	n := &enginetest.MemNet{}
	cfg, _ := testConfig(t, n, "s1")
	cfg.Trainer = TrainerConfig{Socket: filepath.Join(t.TempDir(), "t.sock")}
	cfg.Logger = testLogger(t)
	if mod != nil {
		mod(&cfg.Config)
	}
	if cfg.Trainer.DType != "float32" { // the fake storage runs only its own pipeline
		p, _, err := trainer.CutTail(cfg.Pipeline)
		if err != nil {
			t.Fatal(err)
		}
		fake.Pipe = p
	}
	n.Serve(t, "s1", fake)
	a, err := cfg.new()
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
	return cfg.Trainer.Socket, a
}

// startTrainerAgentB is startTrainerAgent for benchmarks.
func startTrainerAgentB(b *testing.B, mod func(*Config)) string {
	path, _ := startTrainerAgentA(b, mod)
	return path
}

// runRanks connects local ranks 0..n-1 of world n and runs epoch e on each.
func runRanks(t *testing.T, path string, n int, e uint64, prep func(lr int, tt *testTrainer)) []*testTrainer {
	t.Helper()
	ts := make([]*testTrainer, n)
	for lr := range n {
		tt, err := dialTrainer(t, path, handoff.HelloMsg{Rank: lr, World: n, LocalRank: lr, LocalWorld: n})
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
					want := schedule.RankOrder(7, 2, lr, 3, enginetest.Samples, 5, false)
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

func TestTrainerSlowRankDoesNotStallOthers(t *testing.T) {
	path := startTrainerAgent(t, func(c *Config) { c.Batch = 4 })
	var mu sync.Mutex
	var fastDone, slowBatchesAtFastDone int
	ts := make([]*testTrainer, 4)
	for lr := range 4 {
		tt, err := dialTrainer(t, path, handoff.HelloMsg{Rank: lr, World: 4, LocalRank: lr, LocalWorld: 4})
		if err != nil {
			t.Fatal(err)
		}
		if lr == 3 {
			// Long enough that the fast ranks' epoch, under make test's
			// load and the race detector, ends well inside two of its
			// batches (at 100 ms it did not, once).
			tt.delay = 300 * time.Millisecond
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
					slowBatchesAtFastDone = int(ts[3].taken.Load())
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	// The slow rank's batches take 300 ms each; the fast ranks must not
	// wait for it.
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
	if len(seen) != enginetest.Samples {
		t.Errorf("%d positions, want %d", len(seen), enginetest.Samples)
	}
}

func TestTrainerResume(t *testing.T) {
	for _, strict := range []bool{true, false} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			path := startTrainerAgent(t, func(c *Config) { c.StrictOrder = strict; c.Batch = 4 })
			hello := handoff.HelloMsg{Rank: 0, World: 1, LocalRank: 0, LocalWorld: 1}
			full, err := dialTrainer(t, path, hello)
			if err != nil {
				t.Fatal(err)
			}
			if err := full.epoch(3, nil); err != nil {
				t.Fatal(err)
			}
			full.c.Close()
			const k = 5
			cut := redial(t, path, hello)
			cut.stopAt = k
			if err := cut.epoch(3, nil); !errors.Is(err, errStopped) {
				t.Fatalf("killed trainer: %v", err)
			}
			resume := &handoff.ResumeMsg{Batches: k}
			if !strict {
				resume.Consumed = make([]byte, (cut.w.PositionsPerEpoch+7)/8)
				for _, r := range cut.rows {
					resume.Consumed[r.pos>>3] |= 1 << (r.pos & 7)
				}
			}
			again := redial(t, path, hello)
			if err := again.epoch(3, resume); err != nil {
				t.Fatal(err)
			}
			if got, want := again.batches, full.w.BatchesPerEpoch-k; got != want {
				t.Errorf("resumed run: %d batches, want %d", got, want)
			}
			if strict {
				rest := full.rows[k*4:]
				if len(again.rows) != len(rest) {
					t.Fatalf("resumed %d rows, want %d", len(again.rows), len(rest))
				}
				for i, r := range again.rows {
					if r.sample != rest[i].sample || r.sha != rest[i].sha || r.batch != rest[i].batch {
						t.Fatalf("row %d after resume: sample %d batch %d, want sample %d batch %d (or bytes differ)", i, r.sample, r.batch, rest[i].sample, rest[i].batch)
					}
				}
				return
			}
			seen := map[uint64]int{}
			for _, r := range append(slices.Clone(cut.rows), again.rows...) {
				seen[r.pos]++
			}
			for _, r := range full.rows {
				if seen[r.pos] != 1 {
					t.Errorf("position %d delivered %d times across the kill", r.pos, seen[r.pos])
				}
			}
			if len(seen) != len(full.rows) {
				t.Errorf("%d positions across the kill, want %d", len(seen), len(full.rows))
			}
		})
	}
}

// redial connects a rank again once the agent noticed its previous
// connection closed.
func redial(t *testing.T, path string, hello handoff.HelloMsg) *testTrainer {
	t.Helper()
	var err error
	for range 100 {
		var tt *testTrainer
		if tt, err = dialTrainer(t, path, hello); err == nil {
			return tt
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// TestTrainerDTypes: uint8 rows finished with the client's table equal the
// float32 rows, byte for byte.
func TestTrainerDTypes(t *testing.T) {
	run := func(dtype string) *testTrainer {
		path := startTrainerAgent(t, func(c *Config) { c.StrictOrder = true; c.Trainer.DType = dtype })
		tt, err := dialTrainer(t, path, handoff.HelloMsg{Rank: 0, World: 1, LocalRank: 0, LocalWorld: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := tt.epoch(1, nil); err != nil {
			t.Fatal(err)
		}
		return tt
	}
	u8, f32 := run("uint8"), run("float32")
	if u8.w.Normalize == nil || !u8.w.ToTensor || u8.w.Layout != "NHWC" || f32.w.Layout != "NCHW" {
		t.Fatalf("welcome: %+v / %+v", u8.w, f32.w)
	}
	if len(u8.rows) != len(f32.rows) || len(u8.rows) == 0 {
		t.Fatalf("%d and %d rows", len(u8.rows), len(f32.rows))
	}
	var lut [3][256]float32
	for c := range 3 {
		for v := range 256 {
			lut[c][v] = (float32(v)/255 - u8.w.Normalize.Mean[c]) / u8.w.Normalize.Std[c]
		}
	}
	for i, r := range u8.rows {
		h, w := u8.w.RowShape[0], u8.w.RowShape[1]
		out := make([]byte, 4*3*h*w)
		for y := range h {
			for x := range w {
				for c := range 3 {
					binary.LittleEndian.PutUint32(out[4*(c*h*w+y*w+x):], math.Float32bits(lut[c][r.row[(y*w+x)*3+c]]))
				}
			}
		}
		if r.sample != f32.rows[i].sample || sha256.Sum256(out) != f32.rows[i].sha {
			t.Fatalf("row %d (sample %d): uint8 + table differs from float32", i, r.sample)
		}
	}
}

func TestTrainerMetrics(t *testing.T) {
	path, a := startTrainerAgentA(t, nil)
	runRanks(t, path, 2, 0, nil)
	rec := httptest.NewRecorder()
	a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"sophon_compute_samples_total 64",
		`sophon_compute_trainer_batches_total{rank="1"} 4`,
		`sophon_compute_trainer_wait_seconds_total{rank="0"}`,
		`sophon_compute_bytes_received_total{split="0"}`,
		"sophon_compute_queue_depth 0",
		`sophon_peer_warnings_total{reason="trainer_refused"} 0`,
		`sophon_peer_warnings_dropped_total{reason="tls_handshake_rejected"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// BenchmarkSlowRank: four local ranks whose training step takes 20 ms a
// batch, one of them ten times slower; it reports the three others'
// batches/s as a fraction of a rank's rate when it trains alone with the
// same step (target >= 0.9), and checks every sample reached one rank.
func BenchmarkSlowRank(b *testing.B) {
	const step = 20 * time.Millisecond
	rate := func(tt *testTrainer, start, end time.Time) float64 {
		return float64(tt.batches) / end.Sub(start).Seconds()
	}
	for range b.N {
		// Solo: one rank on its own agent.
		path := startTrainerAgentB(b, func(c *Config) { c.Batch = 2 })
		solo, err := dialTrainer(b, path, handoff.HelloMsg{Rank: 0, World: 1, LocalRank: 0, LocalWorld: 1})
		if err != nil {
			b.Fatal(err)
		}
		solo.delay = step
		t0 := time.Now()
		if err := solo.epoch(0, nil); err != nil {
			b.Fatal(err)
		}
		soloRate := rate(solo, t0, time.Now())

		path = startTrainerAgentB(b, func(c *Config) { c.Batch = 2 })
		ts := make([]*testTrainer, 4)
		for lr := range 4 {
			if ts[lr], err = dialTrainer(b, path, handoff.HelloMsg{Rank: lr, World: 4, LocalRank: lr, LocalWorld: 4}); err != nil {
				b.Fatal(err)
			}
			ts[lr].delay = step
		}
		ts[3].delay = 10 * step
		ends := make([]time.Time, 4)
		var wg sync.WaitGroup
		t0 = time.Now()
		for lr, tt := range ts {
			wg.Go(func() {
				if err := tt.epoch(0, nil); err != nil {
					b.Error(err)
				}
				ends[lr] = time.Now()
			})
		}
		wg.Wait()
		worst := 1e9
		for lr := range 3 {
			worst = min(worst, rate(ts[lr], t0, ends[lr])/soloRate)
		}
		seen := map[uint64]int{}
		for _, tt := range ts {
			for _, r := range tt.rows {
				seen[r.pos]++
			}
		}
		if len(seen) != enginetest.Samples {
			b.Errorf("%d positions delivered, want %d", len(seen), enginetest.Samples)
		}
		for p, c := range seen {
			if c != 1 {
				b.Errorf("position %d delivered %d times", p, c)
			}
		}
		b.ReportMetric(worst, "fast-rank/solo")
		b.ReportMetric(soloRate, "solo-batches/s")
		b.Logf("solo %.1f batches/s; with a rank 10x slower the three others kept %.3f of it (worst); slow rank %d batches", soloRate, worst, ts[3].batches)
	}
}
