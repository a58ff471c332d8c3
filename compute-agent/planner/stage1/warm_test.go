package stage1

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// asked records the samples a client's Fetch streams ask for, in order.
type asked struct {
	mu      sync.Mutex
	samples []uint64
}

func (a *asked) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	return askedStream{s, a}, err
}

func (a *asked) list() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.samples)
}

type askedStream struct {
	grpc.ClientStream
	a *asked
}

func (s askedStream) SendMsg(m any) error {
	if r, ok := m.(*dataplanepb.FetchRequest); ok {
		s.a.mu.Lock()
		s.a.samples = append(s.a.samples, r.GetSample())
		s.a.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// recordingSource is a storage agent (enginetest.NewStorage) behind a
// client that records what it asks.
func recordingSource(t *testing.T) (memSource, *asked) {
	t.Helper()
	var net enginetest.MemNet
	net.Serve(t, "storage:1", enginetest.NewStorage(t, "storage:1"))
	c, a := recordingClient(t, &net)
	return memSource{c: c, cpus: 1}, a
}

// recordingClient is a connection of its own to net's storage:1 whose
// client records what it asks.
func recordingClient(t *testing.T, net *enginetest.MemNet) (dataplanepb.StorageClient, *asked) {
	t.Helper()
	a := &asked{}
	conn, err := grpc.NewClient("passthrough:///storage:1", grpc.WithContextDialer(net.Dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(a.stream))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dataplanepb.NewStorageClient(conn), a
}

// TestProbeStorageWarm: the storage probe first asks its first
// storageWarm samples untimed, then every sample in its turn, and keeps
// the cost of the timed asks only: each warm-up sample is asked twice,
// and a probe that never runs out of time keeps a cost for every sample.
func TestProbeStorageWarm(t *testing.T) {
	src, a := recordingSource(t)
	ids := make([]uint64, 20)
	for i := range ids {
		ids[i] = uint64(i)
	}
	cfg := &Config{Now: (&stepClock{t: time.Unix(0, 0)}).now, Pipeline: enginetest.Pipeline(t), PipelineID: enginetest.Pipeline(t).ID(), Seed: 1}
	pr, err := ProbeStorage(context.Background(), cfg, []Source{src}, ids)
	if err != nil {
		t.Fatal(err)
	}
	if storageWarm < 1 {
		t.Fatalf("storageWarm = %d: the probe times a storage agent's first offloads", storageWarm)
	}
	want := append(slices.Clone(ids[:storageWarm]), ids...)
	if got := a.list(); !slices.Equal(got, want) {
		t.Errorf("asked %v, want %v", got, want)
	}
	if len(pr.ns) != len(ids) {
		t.Errorf("kept %d costs, want %d", len(pr.ns), len(ids))
	}
}

// TestLinkProbeFromMiddle: the link probe asks the shard from its middle
// on, so the samples it keeps for the storage probe are not the ones the
// first epoch (and a profile recorded in it) serves first.
func TestLinkProbeFromMiddle(t *testing.T) {
	if got, want := fromMiddle([]uint64{1, 2, 3, 4, 5}), []uint64{3, 4, 5, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("fromMiddle = %v, want %v", got, want)
	}
	if got := fromMiddle(nil); len(got) != 0 {
		t.Errorf("fromMiddle(nil) = %v", got)
	}
	shard := []uint64{1, 2, 3, 4}
	fromMiddle(shard)
	if !slices.Equal(shard, []uint64{1, 2, 3, 4}) {
		t.Errorf("fromMiddle changed its argument: %v", shard)
	}

	src, a := recordingSource(t)
	shard = make([]uint64, 40)
	for i := range shard {
		shard[i] = uint64(39 - i)
	}
	cfg := &Config{Now: time.Now, Pipeline: enginetest.Pipeline(t), PipelineID: enginetest.Pipeline(t).ID(), Seed: 1, Window: 4, Budget: time.Minute}
	_, _, ids, _, _, err := cfg.measureLink(context.Background(), []Source{src}, shard)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.list(); len(got) != len(shard) || !slices.Equal(got[:20], shard[20:]) {
		t.Errorf("link probe asked %v, want the shard from its middle on", got)
	}
	if len(ids) != probeKeep {
		t.Fatalf("kept %d samples, want %d", len(ids), probeKeep)
	}
	// Answers may pass one another in the window: of the shard's second
	// half (ids below 20), asked first, nearly all are kept; asked from
	// the start, the first 32 answers would hold 12 of them.
	var second int
	for _, id := range ids {
		if id < 20 {
			second++
		}
	}
	if second < 18 {
		t.Errorf("kept %v: %d of the shard's second half, want at least 18", ids, second)
	}
}
