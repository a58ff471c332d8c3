package computeagent

import (
	"context"
	"fmt"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// The tests in this file run against the real storage agent, in process.

// writeImageFolder writes the test dataset as an ImageFolder, sample i in
// class i%3, with sample bad (if in range) truncated.
func writeImageFolder(t *testing.T, bad int) string {
	t.Helper()
	dir := t.TempDir()
	for i, b := range enginetest.Dataset(t) {
		if i == bad {
			b = b[:len(b)/2]
		}
		class := filepath.Join(dir, fmt.Sprintf("class%d", i%3))
		if err := os.MkdirAll(class, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%03d.jpg", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startStorage serves a storage agent on lis until the test ends.
func startStorage(t *testing.T, cfg storageagent.Config, k storageagent.Knobs, lis net.Listener) *storageagent.Agent {
	t.Helper()
	a, err := storageagent.NewWithKnobs(cfg, k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Serve(ctx, lis); err != nil {
			t.Errorf("storage agent: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		if err := a.Close(); err != nil {
			t.Errorf("storage agent close: %v", err)
		}
		wg.Wait()
	})
	return a
}

// bufNet dials bufconn listeners by address.
type bufNet map[string]*bufconn.Listener

func (n bufNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	l := n[addr]
	if l == nil {
		return nil, fmt.Errorf("bufnet: nothing at %s", addr)
	}
	return l.DialContext(ctx)
}

func TestWithStorageAgent(t *testing.T) {
	const bad = 21
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20), "st2:7070": bufconn.Listen(1 << 20)}
	dir := writeImageFolder(t, bad)
	for addr, l := range n {
		startStorage(t, storageagent.Config{Data: dir, Name: addr, CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, l)
	}
	p := enginetest.Pipeline(t)
	resize, err := planner.ResizeOff(p)
	if err != nil {
		t.Fatal(err)
	}
	splits := map[uint64]int{}
	for s := range uint64(enginetest.Samples) {
		splits[s] = int((s * 7) % uint64(p.Len()+1))
	}
	mixed := planner.PlanOf("mixed", p.ID(), 0, splits)
	var ref map[uint64][32]byte
	for _, plan := range []*policy.Plan{planner.NoOff(), planner.AllOff(p), resize, mixed} {
		cfg, rec := testConfig(t, nil, "st1:7070", "st2:7070")
		cfg.Dial = n.Dial
		cfg.Plan = plan
		cfg.OnError = OnErrorSkip
		cfg.Codec = 1 // zstd
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", plan.Policy, err)
		}
		r := reports[0]
		checkReport(t, r)
		if r.SamplesFailed != 1 || r.Failed[0].Kind != "TRUNCATED" {
			t.Fatalf("%s: failed %+v, want one TRUNCATED sample", plan.Policy, r.Failed)
		}
		badID := r.Failed[0].Sample
		want := []uint64{}
		for s := range uint64(enginetest.Samples) {
			if s != badID {
				want = append(want, s)
			}
		}
		got := rec.epoch(0)
		checkOnce(t, got, want)
		m := map[uint64][32]byte{}
		for _, d := range got {
			m[d.sample] = d.sha
		}
		if ref == nil {
			ref = m
		} else if !maps.Equal(ref, m) {
			t.Errorf("%s: tensors differ from nooff's", plan.Policy)
		}
		if r.StorageCPUSeconds <= 0 {
			t.Errorf("%s: storage cpu seconds %v", plan.Policy, r.StorageCPUSeconds)
		}
		t.Logf("%s: %d samples, %d bytes, by split %+v", plan.Policy, r.Samples, r.BytesReceived, r.BySplit)
	}
}

func TestMembershipDiscovery(t *testing.T) {
	network := &memberlist.MockNetwork{}
	storageTr := network.NewTransport("storage-1")
	computeTr := network.NewTransport("compute-1")
	ip, port, err := storageTr.FinalAdvertiseAddr("", 0)
	if err != nil {
		t.Fatal(err)
	}
	storageGossip := net.JoinHostPort(ip.String(), strconv.Itoa(port))

	// Secure as deployed: mutual TLS with the identities of a dev CA, and
	// encrypted, labelled gossip.
	certs, err := tlsconf.WriteDevCerts(tlsconf.DevCerts{Dir: t.TempDir(), Cluster: "lab",
		Storage: []string{"storage-1"}, Compute: []string{"compute-1"}, Hosts: []string{"st1"}})
	if err != nil {
		t.Fatal(err)
	}
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{
		Data: writeImageFolder(t, -1), Name: "storage-1", CPUs: 1, AllowClientSpecs: true,
		Gossip: membership.Gossip{Bind: storageGossip, KeyFile: certs.GossipKey}, Advertise: "st1:7070",
		Cluster: "lab", TLS: certs.Storage["storage-1"],
	}, storageagent.Knobs{GossipTransport: storageTr, GossipTune: membership.FastTiming}, n["st1:7070"])

	// After the compute agent leaves, the storage agent may still gossip
	// to its transport, whose channels are unbuffered: drain them until
	// the storage agent is gone (cleanups run last-in first-out).
	stop := make(chan struct{})
	var drain sync.WaitGroup
	t.Cleanup(func() {
		close(stop)
		drain.Wait()
	})

	cfg, rec := testConfig(t, nil)
	cfg.Discovery = nil
	cfg.Name = "compute-1"
	cfg.Gossip = membership.Gossip{Bind: "compute-1", Join: []string{storageGossip}, KeyFile: certs.GossipKey}
	cfg.GossipTransport = computeTr
	cfg.GossipTune = membership.FastTiming
	cfg.Dial = n.Dial
	cfg.Insecure = false
	cfg.Cluster, cfg.TLS = "lab", certs.Compute["compute-1"]
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reports, err := a.Run(ctx)
	drain.Go(func() {
		for {
			select {
			case <-computeTr.PacketCh():
			case c := <-computeTr.StreamCh():
				_ = c.Close()
			case <-stop:
				return
			}
		}
	})
	if cerr := a.Close(); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, reports[0])
	checkOnce(t, rec.epoch(0), allSamples())
	if len(reports[0].Storage) != 1 || reports[0].Storage[0] != "storage-1" {
		t.Errorf("storage used %v, want [storage-1]", reports[0].Storage)
	}
}
