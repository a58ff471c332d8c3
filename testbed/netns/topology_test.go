package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestLinkLayout: the two-node link's names, addresses and qdiscs, and the
// exact commands that make it: the same as before topologies existed, so
// the shaping is byte for byte the same.
func TestLinkLayout(t *testing.T) {
	rate := shape.MustParseRate("400mbit")
	topo, err := linkLayout(Config{Prefix: "tb-1", Rate: rate, Subnet: "10.9.8.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	s, c := topo.Storage[0], topo.Compute[0]
	if len(topo.Storage) != 1 || len(topo.Compute) != 1 || topo.Hub != "" {
		t.Fatalf("%d storage, %d compute nodes, hub %q; want one each and no hub", len(topo.Storage), len(topo.Compute), topo.Hub)
	}
	for _, tc := range []struct{ got, want string }{
		{s.NS, "tb-1-s"}, {s.Dev, "tb-1s"}, {s.IP, "10.9.8.1"},
		{c.NS, "tb-1-c"}, {c.Dev, "tb-1c"}, {c.IP, "10.9.8.2"},
		{s.Rate.String(), "400mbit"}, {c.Rate.String(), "400mbit"},
		{string(s.Role), "storage"}, {string(c.Role), "compute"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %v, want %v", tc.got, tc.want)
		}
	}
	burst := shape.DefaultBurst(400e6) // 200,000 B: 4 ms at 400 Mbit/s
	want := [][]string{
		{"ip", "netns", "add", "tb-1-s"},
		{"ip", "netns", "add", "tb-1-c"},
		{"ip", "link", "add", "tb-1s", "netns", "tb-1-s", "type", "veth", "peer", "name", "tb-1c", "netns", "tb-1-c"},
		{"ip", "-n", "tb-1-s", "link", "set", "lo", "up"},
		{"ip", "-n", "tb-1-s", "addr", "add", "10.9.8.1/24", "dev", "tb-1s"},
		{"ip", "-n", "tb-1-s", "link", "set", "tb-1s", "addrgenmode", "none"},
		{"ip", "-n", "tb-1-s", "link", "set", "tb-1s", "up"},
		{"tc", "-n", "tb-1-s", "qdisc", "add", "dev", "tb-1s", "root", "tbf", "rate", "400mbit", "burst", "200000", "latency", "50000us"},
		{"ip", "-n", "tb-1-c", "link", "set", "lo", "up"},
		{"ip", "-n", "tb-1-c", "addr", "add", "10.9.8.2/24", "dev", "tb-1c"},
		{"ip", "-n", "tb-1-c", "link", "set", "tb-1c", "addrgenmode", "none"},
		{"ip", "-n", "tb-1-c", "link", "set", "tb-1c", "up"},
		{"tc", "-n", "tb-1-c", "qdisc", "add", "dev", "tb-1c", "root", "tbf", "rate", "400mbit", "burst", "200000", "latency", "50000us"},
	}
	if burst != 200000 || !slices.EqualFunc(topo.steps, want, slices.Equal) {
		t.Errorf("steps (burst %d):\n%s\nwant:\n%s", burst, steps(topo.steps), steps(want))
	}
	wantShaped := []ShapedDev{{"tb-1-s", "tb-1s", rate, burst}, {"tb-1-c", "tb-1c", rate, burst}}
	if !slices.Equal(topo.Shaped, wantShaped) {
		t.Errorf("shaped %+v, want %+v", topo.Shaped, wantShaped)
	}
	if got := topo.Namespaces(); !slices.Equal(got, []string{"tb-1-s", "tb-1-c"}) {
		t.Errorf("namespaces %v", got)
	}
	if !slices.Equal(topo.hostDevs, []string{"tb-1s", "tb-1c"}) {
		t.Errorf("stale links looked for: %v", topo.hostDevs)
	}

	// Unshaped: no qdisc at all.
	topo, err = linkLayout(Config{Prefix: "tb-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Shaped) > 0 || strings.Contains(steps(topo.steps), "tc ") || !topo.Storage[0].Rate.IsZero() {
		t.Errorf("unshaped link: qdiscs %+v, steps:\n%s", topo.Shaped, steps(topo.steps))
	}
}

// TestStarLayout: a 2 x 2 star with a rate per storage link: the
// namespaces, interfaces and addresses, every port on the bridge, the hub
// without an address, and tbf on both ends of each storage link at its
// rate, none on the compute links.
func TestStarLayout(t *testing.T) {
	fast, slow := shape.MustParseRate("400mbit"), shape.MustParseRate("100mbit")
	topo, err := starLayout(StarConfig{
		Config:       Config{Prefix: "tb-3", Rate: shape.MustParseRate("1gbit"), Subnet: "10.9.8.0/24"},
		StorageNodes: 2, ComputeNodes: 2, StorageRates: []shape.Rate{fast, slow},
	})
	if err != nil {
		t.Fatal(err)
	}
	if topo.Hub != "tb-3-h" || len(topo.Storage) != 2 || len(topo.Compute) != 2 {
		t.Fatalf("hub %q, %d storage, %d compute nodes", topo.Hub, len(topo.Storage), len(topo.Compute))
	}
	var got []string
	for _, n := range topo.Nodes() {
		got = append(got, fmt.Sprintf("%s/%d %s %s %s %s", n.Role, n.Index, n.NS, n.Dev, n.IP, n.Rate))
	}
	want := []string{
		"storage/0 tb-3-s1 s1 10.9.8.1 400mbit",
		"storage/1 tb-3-s2 s2 10.9.8.2 100mbit",
		"compute/0 tb-3-c1 c1 10.9.8.3 ",
		"compute/1 tb-3-c2 c2 10.9.8.4 ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("nodes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ns := topo.Namespaces(); !slices.Equal(ns, []string{"tb-3-s1", "tb-3-s2", "tb-3-c1", "tb-3-c2", "tb-3-h"}) {
		t.Errorf("namespaces %v", ns)
	}
	fb, sb := shape.DefaultBurst(400e6), shape.DefaultBurst(100e6)
	wantShaped := []ShapedDev{
		{"tb-3-s1", "s1", fast, fb}, {"tb-3-h", "hub-s1", fast, fb},
		{"tb-3-s2", "s2", slow, sb}, {"tb-3-h", "hub-s2", slow, sb},
	}
	if !slices.Equal(topo.Shaped, wantShaped) {
		t.Errorf("shaped %+v\nwant %+v", topo.Shaped, wantShaped)
	}
	text := steps(topo.steps)
	for _, want := range []string{
		"ip -n tb-3-h link add br0 type bridge",
		"ip link add hub-s2 netns tb-3-h type veth peer name s2 netns tb-3-s2",
		"ip -n tb-3-h link set hub-c2 master br0",
		"ip -n tb-3-c2 addr add 10.9.8.4/24 dev c2",
		"tc -n tb-3-h qdisc add dev hub-s2 root tbf rate 100mbit burst 66560",
		"tc -n tb-3-s1 qdisc add dev s1 root tbf rate 400mbit burst 200000",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("steps lack %q:\n%s", want, text)
		}
	}
	for _, port := range []string{"hub-s1", "hub-s2", "hub-c1", "hub-c2"} {
		if !strings.Contains(text, "ip -n tb-3-h link set "+port+" master br0\n") {
			t.Errorf("%s is not on the bridge", port)
		}
	}
	for _, s := range topo.steps {
		line := strings.Join(s, " ")
		if strings.Contains(line, "addr add") && strings.Contains(line, "tb-3-h") {
			t.Errorf("the hub gets an address: %s", line)
		}
		if s[0] == "tc" && (strings.Contains(line, " c1 ") || strings.Contains(line, "hub-c")) {
			t.Errorf("a compute link is shaped: %s", line)
		}
		// Nothing is made in the caller's namespace: every link is created
		// with both ends in namespaces of the topology.
		if len(s) > 3 && s[1] == "link" && s[2] == "add" && !strings.Contains(line, " netns tb-3-") {
			t.Errorf("a link made outside the topology: %s", line)
		}
	}
	if len(topo.hostDevs) != 0 {
		t.Errorf("the star looks for stale links %v in the caller's namespace", topo.hostDevs)
	}

	// One rate for every storage link; 1 x 1 by default.
	topo, err = starLayout(StarConfig{Config: Config{Prefix: "tb-4", Rate: slow, Burst: 100000}, StorageNodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Storage) != 3 || len(topo.Compute) != 1 || len(topo.Shaped) != 6 {
		t.Fatalf("%d storage, %d compute, %d qdiscs; want 3, 1, 6", len(topo.Storage), len(topo.Compute), len(topo.Shaped))
	}
	for _, q := range topo.Shaped {
		if q.Rate != slow || q.Burst != 100000 {
			t.Errorf("qdisc %+v: want 100mbit, burst 100000", q)
		}
	}

	// Compute rates shape each compute link at both ends too.
	fast = shape.MustParseRate("200mbit")
	topo, err = starLayout(StarConfig{Config: Config{Prefix: "tb-5", Rate: fast}, ComputeNodes: 2, ComputeRates: []shape.Rate{slow, slow}})
	if err != nil {
		t.Fatal(err)
	}
	byDev := map[string]shape.Rate{}
	for _, q := range topo.Shaped {
		byDev[q.Dev] = q.Rate
	}
	for dev, want := range map[string]shape.Rate{"s1": fast, "hub-s1": fast, "c1": slow, "hub-c1": slow, "c2": slow, "hub-c2": slow} {
		if byDev[dev] != want {
			t.Errorf("%s shaped at %v, want %v (qdiscs %+v)", dev, byDev[dev], want, topo.Shaped)
		}
	}
	if topo.Compute[1].Rate != slow {
		t.Errorf("compute node 2's rate %v, want %v", topo.Compute[1].Rate, slow)
	}
}

func TestStarConfigRejects(t *testing.T) {
	r := shape.MustParseRate("100mbit")
	for name, c := range map[string]StarConfig{
		"rates for fewer nodes":         {StorageNodes: 3, StorageRates: []shape.Rate{r, r}},
		"an unset rate":                 {StorageNodes: 2, StorageRates: []shape.Rate{r, {}}},
		"compute rates for fewer nodes": {ComputeNodes: 2, ComputeRates: []shape.Rate{r}},
		"negative nodes":                {StorageNodes: -1},
		"subnet too small":              {Config: Config{Subnet: "10.0.0.0/30"}, StorageNodes: 2, ComputeNodes: 1},
		"bad prefix":                    {Config: Config{Prefix: "much-too-long-prefix"}},
		"bad subnet":                    {Config: Config{Subnet: "fd00::/64"}},
	} {
		if _, err := NewStar(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewStar = %v, want ErrConfig", name, err)
		}
	}
	// Exactly enough host addresses: a /29 has 6.
	if _, err := starLayout(StarConfig{Config: Config{Subnet: "10.0.0.8/29"}, StorageNodes: 4, ComputeNodes: 2}); err != nil {
		t.Errorf("4 + 2 nodes in a /29: %v", err)
	}
}

func steps(s [][]string) string {
	var b strings.Builder
	for _, l := range s {
		b.WriteString(strings.Join(l, " ") + "\n")
	}
	return b.String()
}

// star sets up a star for the test and closes it when the test ends,
// checking that nothing is left.
func star(t *testing.T, cfg StarConfig) *Topology {
	t.Helper()
	if err := Available(); err != nil {
		testutil.Require(t, "namespaces unavailable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topo, err := NewStar(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkGone(t, cfg.Prefix)
	})
	return topo
}

// echo listens on node s and checks that node c can send it a message
// and read it back.
func echo(t *testing.T, s, c *Node) {
	t.Helper()
	lis, err := s.Listen("tcp", net.JoinHostPort(s.IP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, conn)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Dial(ctx, "tcp", lis.Addr().String())
	if err != nil {
		t.Errorf("%s cannot reach %s at %s: %v", c.NS, s.NS, lis.Addr(), err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := "from " + c.NS + " to " + s.NS
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Error(err)
		return
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Errorf("%s -> %s: echoed %q, %v", c.NS, s.NS, got, err)
	}
}

// TestStarConnectivity builds a 2 x 1 and a 2 x 2 star and checks that
// every compute node reaches every storage node over TCP, that the hub
// holds no address and the bridge has every port, and that closing it
// (twice) leaves nothing.
func TestStarConnectivity(t *testing.T) {
	for _, dims := range [][2]int{{2, 1}, {2, 2}} {
		t.Run(fmt.Sprintf("%dx%d", dims[0], dims[1]), func(t *testing.T) {
			prefix := fmt.Sprintf("%sx%d%d", ProcessPrefix(), dims[0], dims[1])
			topo := star(t, StarConfig{Config: Config{Prefix: prefix, Rate: shape.MustParseRate("200mbit")},
				StorageNodes: dims[0], ComputeNodes: dims[1]})
			for _, s := range topo.Storage {
				for _, c := range topo.Compute {
					echo(t, s, c)
				}
			}
			out, err := output(context.Background(), "ip", "-n", topo.Hub, "-o", "addr", "show")
			if err != nil || strings.Contains(out, "inet ") && !strings.Contains(out, "127.0.0.1") {
				t.Errorf("hub addresses: %q %v", out, err)
			}
			out, err = output(context.Background(), "ip", "-n", topo.Hub, "-o", "link", "show", "master", Bridge)
			if err != nil || strings.Count(out, "\n") != dims[0]+dims[1] {
				t.Errorf("bridge ports:\n%s%v", out, err)
			}
			for _, q := range topo.Shaped {
				out, err := exec.Command("tc", "-n", q.NS, "qdisc", "show", "dev", q.Dev).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "200Mbit") {
					t.Errorf("%s in %s: %s %v", q.Dev, q.NS, out, err)
				}
			}
			if err := topo.Close(); err != nil {
				t.Fatal(err)
			}
			if err := topo.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := topo.Storage[0].Counters(); !errors.Is(err, ErrClosed) {
				t.Errorf("Counters after Close = %v, want ErrClosed", err)
			}
			checkGone(t, prefix)
		})
	}
}

// TestStarRates: in a 2 x 1 star whose second storage link is shaped at a
// quarter of the first's rate, the same transfer from each storage node
// to the compute node (one after the other) is much slower over the
// second, and each storage link's counters saw its bytes. The assertion
// is on the ratio, with room for a busy machine: a quarter the rate must
// give under half the throughput.
func TestStarRates(t *testing.T) {
	prefix := ProcessPrefix() + "r"
	fast, slow := shape.MustParseRate("80mbit"), shape.MustParseRate("20mbit")
	topo := star(t, StarConfig{Config: Config{Prefix: prefix}, StorageNodes: 2, StorageRates: []shape.Rate{fast, slow}})
	const size = 1 << 20
	c := topo.Compute[0]
	var secs [2]float64
	for i, s := range topo.Storage {
		before, err := s.Counters()
		if err != nil {
			t.Fatal(err)
		}
		lis, err := s.Listen("tcp", net.JoinHostPort(s.IP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			conn.Write(make([]byte, size))
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		conn, err := c.Dial(ctx, "tcp", lis.Addr().String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, conn)
		secs[i] = time.Since(start).Seconds()
		conn.Close()
		lis.Close()
		wg.Wait()
		if n != size || err != nil {
			t.Fatalf("from %s: %d bytes, %v; want %d", s.NS, n, err, size)
		}
		after, err := s.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if sent := after.Sub(before).TxBytes; sent < size || sent > size*11/10 {
			t.Errorf("%s sent %d bytes on its link, want %d plus headers", s.NS, sent, size)
		}
		t.Logf("%s at %s: %d bytes in %.3f s (%.1f Mbit/s)", s.NS, s.Rate, n, secs[i], float64(n)*8/secs[i]/1e6)
	}
	if ratio := secs[1] / secs[0]; ratio < 2 {
		t.Errorf("the 20mbit link took %.3f s, the 80mbit one %.3f s: ratio %.2f, want above 2 (ideal 4)", secs[1], secs[0], ratio)
	}
}

// TestStarSetupFailure: a set-up that fails part way removes what it made.
func TestStarSetupFailure(t *testing.T) {
	if err := Available(); err != nil {
		testutil.Require(t, "namespaces unavailable: %v", err)
	}
	prefix := ProcessPrefix() + "f"
	topo, err := starLayout(StarConfig{Config: Config{Prefix: prefix, Rate: shape.MustParseRate("100mbit")}, StorageNodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	// After every namespace exists: a step that cannot work.
	topo.steps = append(topo.steps, []string{"ip", "-n", topo.Hub, "link", "set", "nosuchdev0", "up"})
	if err := topo.setup(context.Background()); err == nil || !strings.Contains(err.Error(), "nosuchdev0") {
		t.Errorf("setup = %v, want the failing step's error", err)
	}
	checkGone(t, prefix)
}
