package membership

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math"
	"net"
	"os"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/placement"
)

// cluster is an in-process cluster on a memberlist.MockNetwork. All
// transports are made up front: MockNetwork's maps are not safe to grow while
// nodes gossip.
type cluster struct {
	t        *testing.T
	trs      map[string]*memberlist.MockTransport
	nodes    map[string]*Node
	baseline int

	drainStop chan struct{}
	drains    sync.WaitGroup
	nDrains   int
}

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	c := &cluster{
		t:         t,
		trs:       make(map[string]*memberlist.MockTransport),
		nodes:     make(map[string]*Node),
		baseline:  runtime.NumGoroutine(),
		drainStop: make(chan struct{}),
	}
	network := &memberlist.MockNetwork{}
	for _, n := range names {
		c.trs[n] = network.NewTransport(n)
	}
	t.Cleanup(c.shutdown)
	return c
}

// addr is the gossip address of a node's transport.
func (c *cluster) addr(name string) string {
	ip, port, err := c.trs[name].FinalAdvertiseAddr("", 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}

func (c *cluster) config(name string, meta Meta, join ...string) Config {
	cfg := Config{Name: name, Transport: c.trs[name], Meta: meta, Tune: FastTiming, Logger: zerolog.Nop(), Insecure: true}
	for _, j := range join {
		cfg.Join = append(cfg.Join, c.addr(j))
	}
	return cfg
}

func (c *cluster) start(name string, meta Meta, join ...string) *Node {
	c.t.Helper()
	n, err := New(c.config(name, meta, join...))
	if err != nil {
		c.t.Fatalf("New(%s): %v", name, err)
	}
	c.nodes[name] = n
	return n
}

// stop closes a node, then drains its transport: peers that have not yet
// noticed it left would otherwise block for ever on MockTransport's
// unbuffered channels.
func (c *cluster) stop(name string) {
	c.t.Helper()
	n := c.nodes[name]
	if n == nil {
		return
	}
	delete(c.nodes, name)
	if err := n.Close(); err != nil {
		c.t.Errorf("Close(%s): %v", name, err)
	}
	tr := c.trs[name]
	c.nDrains++
	c.drains.Add(1)
	go func() {
		defer c.drains.Done()
		for {
			select {
			case <-tr.PacketCh():
			case conn := <-tr.StreamCh():
				_ = conn.Close()
			case <-c.drainStop:
				return
			}
		}
	}()
}

// shutdown stops every node and checks that no goroutine outlives them.
func (c *cluster) shutdown() {
	for name := range c.nodes {
		c.stop(name)
	}
	checkGoroutines(c.t, c.baseline+c.nDrains)
	close(c.drainStop)
	c.drains.Wait()
}

// checkGoroutines waits for the goroutine count to fall to want.
func checkGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Errorf("goroutines: got %d, want <= %d\n%s", runtime.NumGoroutine(), want, buf.String())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func storageMeta(grpc string) Meta {
	return Meta{Role: RoleStorage, GRPCAddr: grpc, Cores: 1.5, Fingerprint: "sha256:abc", Version: "test"}
}

func computeMeta() Meta {
	return Meta{Role: RoleCompute, Cores: 8, Version: "test"}
}

func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func TestClusterSeesEachOther(t *testing.T) {
	c := newCluster(t, "s1", "s2", "c1")
	s1 := c.start("s1", storageMeta("10.0.0.1:7070"))
	s2 := c.start("s2", storageMeta("10.0.0.2:7070"), "s1")
	c1 := c.start("c1", computeMeta(), "s2")

	want := []Member{
		{Name: "c1", Addr: c.addr("c1"), Meta: computeMeta()},
		{Name: "s1", Addr: c.addr("s1"), Meta: storageMeta("10.0.0.1:7070")},
		{Name: "s2", Addr: c.addr("s2"), Meta: storageMeta("10.0.0.2:7070")},
	}
	for _, n := range []*Node{s1, s2, c1} {
		eventually(t, n.Self().Name+" to see 3 members", func() bool { return len(n.Members()) == 3 })
		if got := n.Members(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s Members: got %+v, want %+v", n.Self().Name, got, want)
		}
	}

	tests := []struct {
		role Role
		want []string
	}{
		{RoleStorage, []string{"s1", "s2"}},
		{RoleCompute, []string{"c1"}},
		{Role("other"), nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.role), func(t *testing.T) {
			if got := names(c1.ByRole(tt.role)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ByRole(%s): got %v, want %v", tt.role, got, tt.want)
			}
		})
	}
	if got := c1.Self(); !reflect.DeepEqual(got, want[0]) {
		t.Errorf("Self: got %+v, want %+v", got, want[0])
	}
}

func TestWaitFor(t *testing.T) {
	t.Run("second storage joins", func(t *testing.T) {
		c := newCluster(t, "s1", "s2", "c1")
		c.start("s1", storageMeta("10.0.0.1:7070"))
		c1 := c.start("c1", computeMeta(), "s1")

		type result struct {
			ms  []Member
			err error
		}
		res := make(chan result, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			ms, err := c1.WaitFor(ctx, RoleStorage, 2)
			res <- result{ms, err}
		})
		defer wg.Wait()

		select {
		case r := <-res:
			t.Fatalf("WaitFor returned before the second storage joined: %v, %v", names(r.ms), r.err)
		case <-time.After(100 * time.Millisecond):
		}
		c.start("s2", storageMeta("10.0.0.2:7070"), "s1")
		r := <-res
		if r.err != nil {
			t.Fatalf("WaitFor: %v", r.err)
		}
		if got, want := names(r.ms), []string{"s1", "s2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("WaitFor: got %v, want %v", got, want)
		}
	})

	t.Run("already there", func(t *testing.T) {
		c := newCluster(t, "s1")
		s1 := c.start("s1", storageMeta("10.0.0.1:7070"))
		ms, err := s1.WaitFor(context.Background(), RoleStorage, 1)
		if err != nil || len(ms) != 1 {
			t.Errorf("WaitFor: got %v, %v, want [s1], nil", names(ms), err)
		}
	})

	t.Run("context ends", func(t *testing.T) {
		c := newCluster(t, "s1", "s2", "c1")
		c.start("s1", storageMeta("10.0.0.1:7070"))
		c1 := c.start("c1", computeMeta(), "s1")
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		ms, err := c1.WaitFor(ctx, RoleStorage, 2)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitFor err: got %v, want %v", err, context.DeadlineExceeded)
		}
		if got, want := names(ms), []string{"s1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("WaitFor members: got %v, want %v", got, want)
		}
	})

	t.Run("node closed", func(t *testing.T) {
		c := newCluster(t, "c1")
		c1 := c.start("c1", computeMeta())
		errc := make(chan error, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := c1.WaitFor(context.Background(), RoleStorage, 1)
			errc <- err
		})
		time.Sleep(20 * time.Millisecond)
		c.stop("c1")
		wg.Wait()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("WaitFor err: got %v, want %v", err, ErrClosed)
		}
	})
}

// drain empties a Changes channel.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitChange(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no change notification for %s", what)
	}
}

func TestChanges(t *testing.T) {
	c := newCluster(t, "s1", "c1")
	s1 := c.start("s1", storageMeta("10.0.0.1:7070"))
	changes := s1.Changes()
	if s1.Changes() != changes {
		t.Error("Changes returned a different channel on the second call")
	}
	drain(changes) // s1's own join

	c1 := c.start("c1", computeMeta(), "s1")
	waitChange(t, changes, "join")
	eventually(t, "s1 to see c1", func() bool { return len(s1.Members()) == 2 })

	drain(changes)
	if err := c1.Leave(time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	waitChange(t, changes, "leave")
	eventually(t, "s1 to see c1 leave", func() bool { return len(s1.Members()) == 1 })
	if got, want := names(s1.Members()), []string{"s1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Members after leave: got %v, want %v", got, want)
	}
}

func TestUpdateMeta(t *testing.T) {
	c := newCluster(t, "s1", "c1")
	s1 := c.start("s1", Meta{Role: RoleStorage, GRPCAddr: "10.0.0.1:7070", Cores: 2, Version: "test"})
	c1 := c.start("c1", computeMeta(), "s1")
	eventually(t, "c1 to see s1", func() bool { return len(c1.ByRole(RoleStorage)) == 1 })
	drain(c1.Changes())

	updated := Meta{Role: RoleStorage, GRPCAddr: "10.0.0.1:7070", Cores: 2, Fingerprint: "sha256:new", Version: "test"}
	if err := s1.UpdateMeta(updated); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	if got := s1.Self().Meta; got != updated {
		t.Errorf("Self after UpdateMeta: got %+v, want %+v", got, updated)
	}
	waitChange(t, c1.Changes(), "update")
	eventually(t, "c1 to see the new meta", func() bool {
		ms := c1.ByRole(RoleStorage)
		return len(ms) == 1 && ms[0].Meta == updated
	})

	big := updated
	big.Fingerprint = strings.Repeat("f", memberlist.MetaMaxSize)
	if err := s1.UpdateMeta(big); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("UpdateMeta(too large): got %v, want %v", err, ErrMetaTooLarge)
	}
	if got := s1.Self().Meta; got != updated {
		t.Errorf("Self after rejected UpdateMeta: got %+v, want %+v", got, updated)
	}
}

// TestMembersWhileMetaChanges reads Members and Self while both nodes
// re-announce their meta: memberlist updates the nodes it returns from its
// own Members in place, so reading them raced with gossip (go test -race
// caught it once storage agents re-announced their held shards). The
// readers must see only whole metas, and in the end the last one. It runs
// real gossip on loopback: on a MockNetwork the joiner's meta broadcasts
// are never confirmed, so each UpdateMeta would wait out its timeout.
func TestMembersWhileMetaChanges(t *testing.T) {
	g := gossipSetup{g: Gossip{Bind: "127.0.0.1:0"}, insecure: true}
	s1, err := g.start("s1", placedMeta("127.0.0.1:7070"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	g.g.Join = []string{s1.Self().Addr}
	s2, err := g.start("s2", placedMeta("127.0.0.1:7071"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	eventually(t, "s1 to see s2", func() bool { return len(s1.Members()) == 2 })
	const updates = 20
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, n := range []*Node{s1, s2} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, m := range n.Members() {
					if m.Meta.Layout != "fd8d518399cca907" {
						t.Errorf("%s sees %s with meta %+v", n.Self().Name, m.Name, m.Meta)
					}
				}
				_ = n.Self()
				time.Sleep(time.Millisecond) // leave the CPU to gossip
			}
		})
	}
	last := placedMeta("127.0.0.1:7071")
	for i := range updates {
		last.Shards = 1000 + i
		if err := s2.UpdateMeta(last); err != nil {
			t.Errorf("UpdateMeta: %v", err)
		}
		if err := s1.UpdateMeta(placedMeta("127.0.0.1:7070")); err != nil {
			t.Errorf("UpdateMeta: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	eventually(t, "s1 to see s2's last meta", func() bool {
		for _, m := range s1.Members() {
			if m.Name == "s2" {
				return m.Meta == last
			}
		}
		return false
	})
	if got := s2.Self().Meta; got != last {
		t.Errorf("s2.Self: got %+v, want %+v", got, last)
	}
}

func TestMetaValidate(t *testing.T) {
	tests := []struct {
		name string
		meta Meta
		want error
	}{
		{"storage", storageMeta("host:7070"), nil},
		{"compute without grpc", computeMeta(), nil},
		{"no role", Meta{Version: "x"}, ErrBadMeta},
		{"unknown role", Meta{Role: "gpu"}, ErrBadMeta},
		{"negative cores", Meta{Role: RoleStorage, Cores: -1}, ErrBadMeta},
		{"nan cores", Meta{Role: RoleStorage, Cores: math.NaN()}, ErrBadMeta},
		{"infinite cores", Meta{Role: RoleStorage, Cores: math.Inf(1)}, ErrBadMeta},
		{"grpc without port", Meta{Role: RoleStorage, GRPCAddr: "host"}, ErrBadMeta},
		{"fits exactly", fitMeta(0), nil},
		{"one byte over", fitMeta(1), ErrMetaTooLarge},
		{"far too large", Meta{Role: RoleStorage, Fingerprint: strings.Repeat("x", 1000)}, ErrMetaTooLarge},
		{"placement", placedMeta("h:1"), nil},
		{"negative replicas", Meta{Role: RoleStorage, Replicas: -1}, ErrBadMeta},
		{"negative shards", Meta{Role: RoleStorage, Shards: -2}, ErrBadMeta},
		{"held digest not hex", Meta{Role: RoleStorage, Held: "xyz"}, ErrBadMeta},
		{"held digest upper case", Meta{Role: RoleStorage, Held: "ABCDEF0123456789"}, ErrBadMeta},
		{"layout digest too long", Meta{Role: RoleStorage, Layout: strings.Repeat("a", maxDigest+1)}, ErrBadMeta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.meta.Validate(); !errors.Is(got, tt.want) {
				t.Errorf("Validate: got %v, want %v", got, tt.want)
			}
		})
	}
}

// fitMeta returns a Meta whose encoding is MetaMaxSize+over bytes.
func fitMeta(over int) Meta {
	m := Meta{Role: RoleStorage, GRPCAddr: "h:1", Version: "v"}
	b, _ := m.encode()
	m.Fingerprint = strings.Repeat("f", memberlist.MetaMaxSize+over-len(b)-len(`,"fp":""`))
	return m
}

// placedMeta is a storage agent's meta with placement fields.
func placedMeta(grpc string) Meta {
	m := storageMeta(grpc)
	m.Replicas, m.Shards, m.Layout, m.Held, m.Egress = 2, 1250, "fd8d518399cca907", "3067c72c5e501c31", 62_500_000
	return m
}

// TestMetaPlacementFits: the longest storage meta an agent announces, with
// a 253-byte DNS name in its gRPC address, a 64-byte version and every
// placement field at its largest, still fits memberlist's 512 bytes.
func TestMetaPlacementFits(t *testing.T) {
	host := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if len(host) != 253 {
		t.Fatalf("host is %d bytes, want 253 (the longest DNS name)", len(host))
	}
	m := Meta{
		Role:        RoleStorage,
		GRPCAddr:    net.JoinHostPort(host, "65535"),
		Cores:       1024.123456789,
		Fingerprint: "0123456789abcdef", // dataplanepb.Fingerprinter: 16 hex digits
		Version:     strings.Repeat("v", 64),
		Replicas:    placement.MaxReplicas,
		Shards:      placement.MaxShards,
		Layout:      "0123456789abcdef",
		Held:        "fedcba9876543210",
		Egress:      math.MaxUint64,
	}
	b, err := m.encode()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		t.Fatalf("meta is %d bytes, limit %d", len(b), memberlist.MetaMaxSize)
	}
	t.Logf("longest storage meta: %d of %d bytes", len(b), memberlist.MetaMaxSize)
	got, err := decodeMeta(b)
	if err != nil || got != m {
		t.Errorf("round trip: got %+v, %v, want %+v", got, err, m)
	}
}

func TestMetaDecode(t *testing.T) {
	for _, m := range []Meta{storageMeta("h:1"), placedMeta("h:1")} {
		b, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Errorf("round trip: got %+v, %v, want %+v", got, err, m)
		}
	}
	for _, bad := range []string{"", "{", "[]", `{"grpc":"h:1"}`, `{"role":"storage","rep":-1}`,
		`{"role":"storage","sh":-5}`, `{"role":"storage","held":"<script>"}`, `{"role":"storage","sh":1e400}`} {
		if _, err := decodeMeta([]byte(bad)); !errors.Is(err, ErrBadMeta) {
			t.Errorf("decodeMeta(%q): got %v, want %v", bad, err, ErrBadMeta)
		}
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want error
	}{
		{"meta too large", func(c *Config) { c.Meta.Fingerprint = strings.Repeat("x", 600) }, ErrMetaTooLarge},
		{"bad role", func(c *Config) { c.Meta.Role = "" }, ErrBadMeta},
		{"short secret key", func(c *Config) { c.SecretKey = make([]byte, 15) }, ErrBadSecretKey},
		{"bad bind", func(c *Config) { c.Transport = nil; c.Bind = "nohost" }, ErrBadConfig},
		{"bad advertise", func(c *Config) { c.Advertise = "1.2.3.4:x" }, ErrBadConfig},
		{"empty join", func(c *Config) { c.Join = []string{""} }, ErrBadConfig},
		{"nobody to join", func(c *Config) { c.Join = []string{"127.0.0.1:65000"} }, ErrNoPeerJoined},
		{"no key", func(c *Config) { c.Insecure = false; c.Label = "sophon" }, ErrInsecure},
		{"no label", func(c *Config) { c.Insecure = false; c.SecretKey = make([]byte, 32) }, ErrInsecure},
		{"label too long", func(c *Config) { c.Label = strings.Repeat("x", 256) }, ErrBadConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, "n")
			cfg := c.config("n", storageMeta("h:1"))
			tt.edit(&cfg)
			n, err := New(cfg)
			if err == nil {
				_ = n.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("New: got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	c := newCluster(t, "s1", "c1")
	c.start("s1", storageMeta("h:1"))
	c1 := c.start("c1", computeMeta(), "s1")
	if err := c1.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := c1.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if err := c1.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Close: got %v, want %v", err, ErrClosed)
	}
	if err := c1.UpdateMeta(computeMeta()); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Close: got %v, want %v", err, ErrClosed)
	}
	c.stop("c1") // drains its transport; Close a third time
}

func TestParseSecretKey(t *testing.T) {
	key16 := []byte("0123456789abcdef")
	key32 := bytes.Repeat([]byte{0xa5}, 32)
	tests := []struct {
		name string
		in   string
		want []byte
		err  error
	}{
		{"empty means none", "", nil, nil},
		{"blank means none", " \n", nil, nil},
		{"hex 16", hex.EncodeToString(key16), key16, nil},
		{"hex 32 upper case", strings.ToUpper(hex.EncodeToString(key32)), key32, nil},
		{"base64 16", base64.StdEncoding.EncodeToString(key16), key16, nil},
		{"base64 32 with newline", base64.StdEncoding.EncodeToString(key32) + "\n", key32, nil},
		{"raw url base64 24", base64.RawURLEncoding.EncodeToString(key32[:24]), key32[:24], nil},
		{"hex of wrong length", hex.EncodeToString(key32[:20]), nil, ErrBadSecretKey},
		{"base64 of wrong length", base64.StdEncoding.EncodeToString(key32[:8]), nil, ErrBadSecretKey},
		{"garbage", "not a key!", nil, ErrBadSecretKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSecretKey(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err: got %v, want %v", err, tt.err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("key: got %x, want %x", got, tt.want)
			}
		})
	}
}

func TestSecretKeyRoundTrip(t *testing.T) {
	for _, size := range []int{16, 24, 32} {
		key := make([]byte, size)
		if _, err := rand.Read(key); err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key)} {
			got, err := ParseSecretKey(text)
			if err != nil || !bytes.Equal(got, key) {
				t.Errorf("ParseSecretKey(%q): got %x, %v, want %x", text, got, err, key)
			}
		}
	}
}

// TestGossipSecurity runs real UDP and TCP gossip on loopback: a node of
// the cluster's key and label joins; a keyless node, a node with another key
// and a node with another label cannot, and the cluster logs each rejection
// at warn level with the intruder's address.
func TestGossipSecurity(t *testing.T) {
	baseline := runtime.NumGoroutine()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	var logs testutil.SyncBuffer
	seed := gossipSetup{g: Gossip{Bind: "127.0.0.1:0", Key: key}, cluster: "lab"}
	s1, err := seed.start("s1", storageMeta("127.0.0.1:7070"), zerolog.New(&logs).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatalf("Start(s1): %v", err)
	}
	defer s1.Close()
	member := seed
	member.g.Join = []string{s1.Self().Addr}
	c1, err := member.start("c1", computeMeta(), zerolog.Nop())
	if err != nil {
		t.Fatalf("Start(c1): %v", err)
	}
	for _, n := range []*Node{s1, c1} {
		eventually(t, n.Self().Name+" to see 2 members", func() bool { return len(n.Members()) == 2 })
	}
	if got := c1.ByRole(RoleStorage); len(got) != 1 || got[0].Meta != storageMeta("127.0.0.1:7070") {
		t.Errorf("c1 ByRole(storage): got %+v", got)
	}

	tests := []struct {
		name   string
		edit   func(*gossipSetup)
		reason string // in the warn line
	}{
		{"no key", func(g *gossipSetup) { g.g.Key, g.insecure = "", true }, "not encrypted"},
		{"another key", func(g *gossipSetup) { g.g.Key = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{8}, 32)) }, "decrypt"},
		{"another label", func(g *gossipSetup) { g.cluster = "other" }, "label"},
		{"no key, default label", func(g *gossipSetup) { g.g.Key, g.insecure, g.cluster = "", true, "" }, "label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := member
			tt.edit(&g)
			n, err := g.start("intruder", storageMeta("127.0.0.1:7071"), zerolog.Nop())
			if err == nil {
				_ = n.Close()
				t.Fatal("an intruder joined the cluster")
			}
			if !errors.Is(err, ErrNoPeerJoined) {
				t.Errorf("Start: got %v, want %v", err, ErrNoPeerJoined)
			}
			eventually(t, "a warn line about the intruder", func() bool {
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"peer":"127.0.0.1:`) &&
						strings.Contains(strings.ToLower(line), tt.reason) {
						return true
					}
				}
				return false
			})
		})
	}
	if got := len(s1.Members()); got != 2 {
		t.Errorf("s1 Members after intruders: got %d, want 2", got)
	}
	if err := c1.Close(); err != nil {
		t.Errorf("Close(c1): %v", err)
	}
	if err := s1.Close(); err != nil {
		t.Errorf("Close(s1): %v", err)
	}
	checkGoroutines(t, baseline)
}

// gossipSetup is an agent's gossip settings: the shared ones, its
// cluster's name and its insecure switch.
type gossipSetup struct {
	g        Gossip
	cluster  string
	insecure bool
}

// start joins as name announcing meta, with FastTiming.
func (s gossipSetup) start(name string, meta Meta, log zerolog.Logger) (*Node, error) {
	cfg, err := s.g.Config(s.cluster, name, meta, s.insecure, log)
	if err != nil {
		return nil, err
	}
	cfg.Tune = FastTiming
	return New(cfg)
}

func TestGossipCheck(t *testing.T) {
	dir := t.TempDir()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	keyFile := dir + "/gossip.key"
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := dir + "/bad.key"
	if err := os.WriteFile(badFile, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		g       Gossip
		check   error // from Check
		key     error // from SecretKey
		wantKey bool
	}{
		{"key", Gossip{Key: key}, nil, nil, true},
		{"key file", Gossip{KeyFile: keyFile}, nil, nil, true},
		{"nothing", Gossip{}, ErrInsecure, nil, false},
		{"both", Gossip{Key: key, KeyFile: keyFile}, ErrBadConfig, ErrBadConfig, false},
		{"bad key", Gossip{Key: "short"}, ErrBadSecretKey, ErrBadSecretKey, false},
		{"bad key file", Gossip{KeyFile: badFile}, nil, ErrBadSecretKey, false},
		{"missing key file", Gossip{KeyFile: dir + "/none"}, nil, ErrBadConfig, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.g.Check(false); !errors.Is(err, tt.check) {
				t.Errorf("Check: got %v, want %v", err, tt.check)
			}
			want := tt.check
			if errors.Is(want, ErrInsecure) {
				want = nil // insecure needs no key
			}
			if err := tt.g.Check(true); !errors.Is(err, want) {
				t.Errorf("Check(insecure): got %v, want %v", err, want)
			}
			k, err := tt.g.SecretKey()
			if !errors.Is(err, tt.key) {
				t.Errorf("SecretKey: got %v, want %v", err, tt.key)
			}
			if (k != nil) != tt.wantKey {
				t.Errorf("SecretKey: got %x, want a key %v", k, tt.wantKey)
			}
		})
	}
	if err := (Gossip{}).Check(true); err != nil {
		t.Errorf("Check(insecure) without a key: %v", err)
	}
	if err := (Gossip{}).Check(false); err == nil || !strings.Contains(err.Error(), "make certs") || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("Check without a key says no remedy: %v", err)
	}
	cfg, err := Gossip{Key: key}.Config("", "n", storageMeta("h:1"), false, zerolog.Nop())
	if err != nil || cfg.Label != DefaultCluster || len(cfg.SecretKey) != 32 || cfg.Insecure {
		t.Errorf("Config: got label %q, key %x, insecure %v, err %v", cfg.Label, cfg.SecretKey, cfg.Insecure, err)
	}
	if _, err := (Gossip{}).Config("lab", "n", storageMeta("h:1"), false, zerolog.Nop()); !errors.Is(err, ErrInsecure) {
		t.Errorf("Config without a key: got %v, want %v", err, ErrInsecure)
	}
	cfg, err = Gossip{}.Config("lab", "n", storageMeta("h:1"), true, zerolog.Nop())
	if err != nil || cfg.Label != "lab" || cfg.SecretKey != nil || !cfg.Insecure {
		t.Errorf("insecure Config: got label %q, key %x, insecure %v, err %v", cfg.Label, cfg.SecretKey, cfg.Insecure, err)
	}
}

func TestMemberlistLogRouted(t *testing.T) {
	var buf testutil.SyncBuffer
	c := newCluster(t, "s1", "c1")
	c.start("s1", storageMeta("h:1"))
	cfg := c.config("c1", computeMeta(), "s1")
	cfg.Logger = zerolog.New(&buf).Level(zerolog.DebugLevel).With().Str("component", "compute-agent").Logger() // as internal/cli.Logger
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes["c1"] = n
	c.stop("c1")
	out := buf.String()
	checkKeysUnique(t, out)
	if !strings.Contains(out, `"level":"debug","component":"compute-agent","subsystem":"memberlist"`) {
		t.Errorf("no memberlist debug line in the log:\n%s", out)
	}
	if !strings.Contains(out, "memberlist: ") {
		t.Errorf("memberlist's message text missing from the log:\n%s", out)
	}
}
