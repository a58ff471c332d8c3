package netns

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// The delay line on a real two-node link (root): round trips by UDP echo
// and by ping, bulk TCP goodput against the shaped rate, loss, and the
// delay line's CPU. The bulk transfers run in two helper processes (this
// test binary, started in each namespace with helperEnv set), so that this
// process's CPU is the delay line's.

// helperEnv, when set, makes the test binary a bulk-transfer helper
// (helperMain) instead of running tests.
const helperEnv = "SOPHON_NETNS_HELPER"

// helperMain runs the helper that args names, and returns the exit code:
//
//	sink ADDR WARM MEASURE   listen on ADDR, print "ready", take one
//	                         connection and read it to EOF; print the bytes
//	                         and nanoseconds of the MEASURE window that
//	                         starts WARM after the first byte
//	source ADDR FOR          connect to ADDR and write for FOR, then close
func helperMain(args []string) int {
	err := func() error {
		switch {
		case len(args) == 4 && args[0] == "sink":
			warm, err1 := time.ParseDuration(args[2])
			measure, err2 := time.ParseDuration(args[3])
			if err1 != nil || err2 != nil {
				return fmt.Errorf("sink: bad durations %q %q", args[2], args[3])
			}
			return sink(args[1], warm, measure)
		case len(args) == 3 && args[0] == "source":
			d, err := time.ParseDuration(args[2])
			if err != nil {
				return err
			}
			return source(args[1], d)
		}
		return fmt.Errorf("bad helper arguments %q", args)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func sink(addr string, warm, measure time.Duration) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer lis.Close()
	fmt.Println("ready")
	c, err := lis.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1<<18)
	var total, b0 int64
	var first, t0 time.Time
	done := false
	for {
		n, err := c.Read(buf)
		now := time.Now()
		if n > 0 && first.IsZero() {
			first = now
		}
		total += int64(n)
		if !first.IsZero() && t0.IsZero() && now.Sub(first) >= warm {
			t0, b0 = now, total
		}
		if !t0.IsZero() && !done && now.Sub(first) >= warm+measure {
			fmt.Println(total-b0, now.Sub(t0).Nanoseconds())
			done = true
		}
		if err == io.EOF {
			if !done {
				return fmt.Errorf("the source stopped %v after the first byte, before the window ended", now.Sub(first))
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func source(addr string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1<<18)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	return c.(*net.TCPConn).CloseWrite()
}

// wanPair sets up a link on the delay line for the test; it skips, saying
// why, without root or /dev/net/tun.
func wanPair(t *testing.T, cfg Config) *Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Require(t, "needs root: network namespaces, tc and TUN devices (euid %d)", os.Geteuid())
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testutil.Require(t, "needs /dev/net/tun for the delay line: %v", err)
	}
	return setup(t, cfg)
}

// echoServer echoes UDP datagrams on the storage side until the test ends;
// it returns its address.
func echoServer(t *testing.T, p *Pair) string {
	t.Helper()
	var pc net.PacketConn
	err := p.side(true).inNamespace(func() (err error) {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(p.StorageIP, "0"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

// udpRTT measures n round trips, one after the other, from the compute side
// to the echo server at addr; it returns them sorted.
func udpRTT(t *testing.T, p *Pair, addr string, n int) []time.Duration {
	t.Helper()
	c, err := p.Dial(context.Background(), false, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rtts []time.Duration
	buf := make([]byte, 64)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		start := time.Now()
		if _, err := c.Write(buf[:64]); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			m, err := c.Read(buf)
			if err != nil {
				t.Fatalf("echo %d: %v", i, err)
			}
			if m >= 4 && binary.BigEndian.Uint32(buf) == uint32(i) {
				break
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts
}

// udpLost sends n echoes from the compute side, one every gap without
// waiting for replies, and returns how many never came back.
func udpLost(t *testing.T, p *Pair, addr string, n int, gap time.Duration) int {
	t.Helper()
	c, err := p.Dial(context.Background(), false, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan int, 1)
	go func() {
		seen := make(map[uint32]bool)
		buf := make([]byte, 64)
		for {
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			m, err := c.Read(buf)
			if err != nil {
				got <- len(seen)
				return
			}
			if m >= 4 {
				seen[binary.BigEndian.Uint32(buf)] = true
			}
		}
	}()
	buf := make([]byte, 64)
	next := time.Now()
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		next = next.Add(gap)
		time.Sleep(time.Until(next))
	}
	return n - <-got
}

// pingRTT runs count pings from the compute side to the storage side and
// returns the median round trip (robust to one late reply on a busy
// machine, as udpRTT's is); ok is false when ping is not installed.
func pingRTT(t *testing.T, p *Pair, count int) (median time.Duration, ok bool) {
	t.Helper()
	if _, err := exec.LookPath("ping"); err != nil {
		t.Logf("ping is not installed (iputils-ping): round trips by UDP echo only")
		return 0, false
	}
	out, err := p.Command(context.Background(), false, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.05", p.StorageIP).CombinedOutput()
	if err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
	// 64 bytes from 10.213.7.1: icmp_seq=1 ttl=64 time=20.2 ms
	var rtts []time.Duration
	for _, m := range regexp.MustCompile(`time=([\d.]+) ms`).FindAllSubmatch(out, -1) {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(rtts) < count/2 {
		t.Fatalf("ping: %d replies of %d: %s", len(rtts), count, out)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], true
}

// bulkResult is one bulk transfer: the goodput in its measured window,
// and this process's CPU (the delay line) per Gbit it forwarded, both
// directions' bytes counted.
type bulkResult struct {
	goodput    float64 // bit/s of payload
	cpuPerGbit float64 // CPU seconds per 8e9 bits forwarded
	cpu        float64 // CPU seconds, all told
	forwarded  uint64  // bytes, both directions
}

// bulk sends from the storage side to the compute side in helper
// processes for warm + measure + 300 ms, and measures the goodput over
// measure after warm.
func bulk(t *testing.T, p *Pair, warm, measure time.Duration) bulkResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(p.ComputeIP, "5201")
	sinkCmd := p.Command(context.Background(), false, self)
	sinkCmd.Env = append(os.Environ(), helperEnv+"=sink "+addr+" "+warm.String()+" "+measure.String())
	var stderr strings.Builder
	sinkCmd.Stderr = &stderr
	out, err := sinkCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sinkCmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		sinkCmd.Wait()
		t.Fatalf("sink: %q %s", lines.Text(), stderr.String())
	}
	srcCmd := p.Command(context.Background(), true, self)
	srcCmd.Env = append(os.Environ(), helperEnv+"=source "+addr+" "+(warm+measure+300*time.Millisecond).String())
	a0, b0 := p.Topology().LineStats()
	cpu0 := selfCPU()
	srcOut, srcErr := srcCmd.CombinedOutput()
	cpu := selfCPU() - cpu0
	a1, b1 := p.Topology().LineStats()
	if srcErr != nil {
		t.Fatalf("source: %v: %s", srcErr, srcOut)
	}
	var bytes, nanos int64
	if !lines.Scan() {
		sinkCmd.Wait()
		t.Fatalf("sink: no result: %s", stderr.String())
	}
	if _, err := fmt.Sscan(lines.Text(), &bytes, &nanos); err != nil {
		t.Fatalf("sink: %q: %v", lines.Text(), err)
	}
	if err := sinkCmd.Wait(); err != nil {
		t.Fatalf("sink: %v: %s", err, stderr.String())
	}
	fwd := (a1.Bytes - a0.Bytes) + (b1.Bytes - b0.Bytes)
	return bulkResult{goodput: float64(bytes) * 8 / (float64(nanos) / 1e9), cpu: cpu, forwarded: fwd,
		cpuPerGbit: cpu / (float64(fwd) * 8 / 1e9)}
}

// selfCPU is this process's user and system CPU so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// payloadRate is the TCP payload that a link shaped at rate carries with
// packets of mtu bytes: tbf on a TUN device charges each IP packet's
// length, of which 52 bytes are headers (PayloadFraction).
func payloadRate(rate shape.Rate, mtu int) float64 {
	return rate.Bits() * PayloadFraction(mtu, false)
}

// roughly reports whether a round trip got under load is the configured
// want: never under it (2% for the clock) and at most half again over it.
func roughly(got, want time.Duration) bool { return got >= want*98/100 && got <= want*3/2 }

// within reports whether got is within frac of want.
func within(got, want, frac float64) bool { return math.Abs(got/want-1) <= frac }

// TestWANLink: a link at 100 Mbit/s with a 20 ms round trip runs on TUN
// devices shaped by tbf; its round trip, by UDP echo and by ping when
// installed (the median of each), is never under 20 ms and not far over
// it; a bulk TCP transfer's goodput is at most the shaped payload rate
// and at least half of it; closing it leaves nothing: no namespace, no
// device, no goroutine of the delay line. What holds under any load is
// asserted here, beside make test's other streams; the 5% accuracy is
// the quiet-machine check of make wan (TestDelayLineMatrix).
func TestWANLink(t *testing.T) {
	prefix := ProcessPrefix() + "w"
	rate := shape.MustParseRate("100mbit")
	p := wanPair(t, Config{Prefix: prefix, Rate: rate, RTT: 20 * time.Millisecond, Seed: 1})
	topo := p.Topology()
	if topo.WAN == nil || topo.WAN.MTU != DefaultMTU || topo.WAN.RTT != 20*time.Millisecond {
		t.Fatalf("WAN = %+v, want rtt 20ms, mtu %d", topo.WAN, DefaultMTU)
	}
	for _, n := range topo.Nodes() {
		out, err := output(context.Background(), "ip", "-n", n.NS, "-d", "link", "show", n.Dev)
		if err != nil || !strings.Contains(out, "tun type tun") || !strings.Contains(out, "mtu 1500") {
			t.Errorf("%s in %s is not a TUN device of mtu 1500: %s %v", n.Dev, n.NS, out, err)
		}
		if q, err := n.Qdisc(context.Background()); err != nil || q.Kind != "tbf" {
			t.Errorf("%s root qdisc %+v, %v; want tbf", n.Dev, q, err)
		}
	}
	const want = 20 * time.Millisecond
	rtts := udpRTT(t, p, echoServer(t, p), 15)
	med := rtts[len(rtts)/2]
	t.Logf("UDP echo: min %v median %v max %v", rtts[0], med, rtts[len(rtts)-1])
	if !roughly(med, want) {
		t.Errorf("UDP echo round trip %v, want %v to %v", med, want*98/100, want*3/2)
	}
	if med, ok := pingRTT(t, p, 11); ok {
		t.Logf("ping: median %v", med)
		if !roughly(med, want) {
			t.Errorf("ping round trip %v, want %v to %v", med, want*98/100, want*3/2)
		}
	}
	c0, err := topo.Storage[0].Counters()
	if err != nil {
		t.Fatal(err)
	}
	// Half a second measured: this runs beside make test's end-to-end
	// streams, whose checks of kernel against agent bytes a longer bulk
	// transfer disturbs; make wan measures for longer.
	r := bulk(t, p, 300*time.Millisecond, 500*time.Millisecond)
	payload := payloadRate(rate, DefaultMTU)
	t.Logf("bulk: %.2f Mbit/s of payload, want %.2f; delay line %.3f CPU s for %.1f MB = %.2f CPU s per Gbit",
		r.goodput/1e6, payload/1e6, r.cpu, float64(r.forwarded)/1e6, r.cpuPerGbit)
	// NB: the ceiling has room (15%): over half a second, a receiver the
	// loaded machine descheduled at the window's start reads a burst the
	// link queued meanwhile inside the window (a 104 Mbit/s reading of 96.5
	// was seen). No floor: the delay line is this test's own goroutines,
	// and under make test's streams it forwarded a fifth of the rate once
	// (20 of 96.5 Mbit/s); make wan holds the rate to 5% over a longer
	// transfer on a quiet machine.
	if r.goodput > payload*1.15 || !(r.goodput > 0) || r.forwarded == 0 {
		t.Errorf("goodput %.2f Mbit/s (%d bytes forwarded), want some and at most %.2f (the shaped rate, 15%% over)", r.goodput/1e6, r.forwarded, payload*1.15/1e6)
	}
	c1, err := topo.Storage[0].Counters()
	if err != nil {
		t.Fatal(err)
	}
	if sent := c1.Sub(c0).TxBytes; sent < r.forwarded/2 {
		t.Errorf("the storage device counted %d bytes sent, the delay line forwarded %d", sent, r.forwarded)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, prefix)
	// Close waited for the delay line's goroutines.
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "netns.(*lane)") {
		t.Errorf("a lane's goroutine outlived Close:\n%s", stacks)
	}
}

// TestWANLossJitter: with 1% loss each way, about 2% of 2000 echoes are lost
// (1 - 0.99^2), and the delay line counts about 1% of each direction's
// packets lost; with 5 ms of jitter on a 20 ms round trip, sparse echoes
// take no less than 10 ms, their median under 30 ms, and spread over more
// than 5 ms.
func TestWANLossJitter(t *testing.T) {
	p := wanPair(t, Config{Prefix: ProcessPrefix() + "l", Rate: shape.MustParseRate("100mbit"),
		RTT: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01, Seed: 7})
	addr := echoServer(t, p)
	const n = 2000
	lost := udpLost(t, p, addr, n, 500*time.Microsecond)
	toCompute, toStorage := p.Topology().LineStats()
	t.Logf("%d of %d echoes lost; line: to storage %+v, to compute %+v", lost, n, toStorage, toCompute)
	if lost < n/100 || lost > n*32/1000 {
		t.Errorf("%d of %d echoes lost, want 1%% to 3.2%% (expect 2%%)", lost, n)
	}
	for name, s := range map[string]LineStats{"to storage": toStorage, "to compute": toCompute} {
		if f := float64(s.Lost) / float64(s.Lost+s.Packets); f < 0.004 || f > 0.018 {
			t.Errorf("%s: lost %d of %d packets, want about 1%%", name, s.Lost, s.Lost+s.Packets)
		}
	}
	if uint64(lost) != toStorage.Lost+toCompute.Lost {
		t.Errorf("%d echoes lost, the line dropped %d", lost, toStorage.Lost+toCompute.Lost)
	}
	// Sparse echoes (one at a time), so the no-reordering rule rarely holds
	// one back: each way is 10 ms ± 5 ms.
	var rtts []time.Duration
	for len(rtts) < 40 {
		rs := udpRTTLossy(t, p, addr)
		if rs > 0 {
			rtts = append(rtts, rs)
		}
	}
	slices.Sort(rtts)
	// The floor holds under any load (the line never delivers early). The
	// ceiling is on the median: a busy machine's stalls delay a tail of
	// echoes (the 90th percentile: 31 ms on quiet cores, 32 and 49 ms seen
	// beside make test's other streams), while the median stayed at 21 ms
	// in every run; a jitter applied wrong (on top of the delay twice, or
	// in ms for µs) moves it past 30.
	lo, p5, med, p90, hi := rtts[0], rtts[2], rtts[20], rtts[36], rtts[len(rtts)-1]
	t.Logf("jitter: 40 echoes from %v to %v, median %v; 5th percentile %v, 90th %v", lo, hi, med, p5, p90)
	if lo < 10*time.Millisecond-2*early || med > 30*time.Millisecond || p90-p5 < 5*time.Millisecond {
		t.Errorf("round trips from %v to %v (median %v, 5th percentile %v, 90th %v): want none under 10 ms, the median under 30 ms and the 5th to 90th percentiles spread by more than 5 ms", lo, hi, med, p5, p90)
	}
}

// udpRTTLossy is one echo's round trip, or 0 when it was lost.
func udpRTTLossy(t *testing.T, p *Pair, addr string) time.Duration {
	t.Helper()
	c, err := p.Dial(context.Background(), false, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 16)
	if _, err := c.Read(buf); err != nil {
		return 0
	}
	return time.Since(start)
}

// TestWANConfigRejects: the delay line's fields are checked, and the star
// refuses them.
func TestWANConfigRejects(t *testing.T) {
	for name, c := range map[string]Config{
		"negative rtt":    {RTT: -time.Millisecond},
		"negative jitter": {Jitter: -time.Millisecond},
		"loss of 1":       {Loss: 1},
		"negative loss":   {Loss: -0.1},
		"nan loss":        {Loss: math.NaN()},
		"mtu without wan": {MTU: 9000},
		"mtu too small":   {RTT: time.Millisecond, MTU: 500},
		"mtu too large":   {RTT: time.Millisecond, MTU: 70000},
	} {
		if _, err := linkLayout(c); err == nil {
			t.Errorf("%s: linkLayout(%+v) accepted it", name, c)
		}
	}
	if _, err := starLayout(StarConfig{Config: Config{RTT: time.Millisecond}}); err == nil {
		t.Error("a star with a delay line was accepted")
	}
}

// TestWANLayout: on the delay line, the link's steps make no veth and set
// up TUN devices of the MTU asked, each shaped by tbf; the line's queue is
// bounded by the rate.
func TestWANLayout(t *testing.T) {
	topo, err := linkLayout(Config{Prefix: "tb-5", Rate: shape.MustParseRate("100mbit"), Subnet: "10.9.8.0/24",
		RTT: 40 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.001, MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	text := steps(topo.steps)
	for _, want := range []string{
		"ip -n tb-5-s link set tb-5s mtu 9000 txqueuelen 2000 addrgenmode none\n",
		"ip -n tb-5-c addr add 10.9.8.2/24 dev tb-5c\n",
		"tc -n tb-5-c qdisc add dev tb-5c root tbf rate 100mbit",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("steps lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "veth") || topo.devsAt != 2 {
		t.Errorf("devices made at step %d; steps:\n%s", topo.devsAt, text)
	}
	if got, want := topo.WAN.String(), "rtt 40ms, jitter 5ms, loss 0.1% (delay line, mtu 9000)"; got != want {
		t.Errorf("WAN = %q, want %q", got, want)
	}
	// 100 Mbit/s for 20 + 5 + 1000 ms.
	if got, want := topo.lineCfg.maxBytes, int64(100e6/8*1.025); got < want-1 || got > want+1 || topo.lineCfg.oneWay != 20*time.Millisecond {
		t.Errorf("line %+v: want a queue of %d bytes and 20 ms each way", topo.lineCfg, want)
	}
}

// TestDelayLineMatrix is `make wan`: the delay line's accuracy and cost at
// 25, 100 and 500 Mbit/s with a round trip of 0, 20 and 80 ms. Each cell:
// the median of 15 UDP echoes (and of 15 pings, when ping is installed) within
// 5% of the round trip (under 1 ms at 0), a bulk TCP transfer's goodput
// within 5% of the shaped payload rate, and the delay line's CPU per Gbit.
// It runs only with SOPHON_WAN_MATRIX=1 (a minute and a half);
// SOPHON_WAN_MTU sets the TUN devices' MTU.
func TestDelayLineMatrix(t *testing.T) {
	if os.Getenv("SOPHON_WAN_MATRIX") != "1" {
		t.Skip("SKIP: the delay line's accuracy matrix runs with SOPHON_WAN_MATRIX=1 (make wan)")
	}
	mtu := DefaultMTU
	if v := os.Getenv("SOPHON_WAN_MTU"); v != "" {
		var err error
		if mtu, err = strconv.Atoi(v); err != nil {
			t.Fatalf("SOPHON_WAN_MTU=%q: %v", v, err)
		}
	}
	var table, veth []string
	for _, r := range []string{"25mbit", "100mbit", "500mbit"} {
		rate := shape.MustParseRate(r)
		for _, rtt := range []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/rtt=%v", r, rtt), func(t *testing.T) {
				table = append(table, matrixCell(t, rate, rtt, mtu))
			})
		}
		t.Run(fmt.Sprintf("%s/veth", r), func(t *testing.T) {
			veth = append(veth, vethCell(t, rate))
		})
	}
	t.Logf("delay line, mtu %d:\n| rate | RTT | UDP echo RTT (median) | ping RTT (median) | goodput / payload rate | CPU s per Gbit |\n|---|---|---|---|---|---|\n%s",
		mtu, strings.Join(table, "\n"))
	t.Logf("veth pair (no delay line), mtu %d:\n| rate | goodput / payload rate | goodput / shaped rate |\n|---|---|---|\n%s", DefaultMTU, strings.Join(veth, "\n"))
}

// vethCell: a bulk TCP transfer over the veth pair (no delay line), whose
// tbf charges Ethernet frames, carries the shaped rate times
// PayloadFraction(1500, true) (0.956) within 2%: the testbed's cell bound
// and link account assume exactly that, and 2% tells it from the shaped
// rate itself (4.4% more).
func vethCell(t *testing.T, rate shape.Rate) string {
	if os.Geteuid() != 0 {
		testutil.Require(t, "needs root: network namespaces and tc (euid %d)", os.Geteuid())
	}
	p := setup(t, Config{Prefix: ProcessPrefix() + "v", Rate: rate})
	res := bulk(t, p, time.Second, 3*time.Second)
	payload := rate.Bits() * PayloadFraction(DefaultMTU, true)
	if !within(res.goodput, payload, 0.02) {
		t.Errorf("goodput %.2f Mbit/s, want %.2f (%.4f of %v) within 2%%", res.goodput/1e6, payload/1e6, PayloadFraction(DefaultMTU, true), rate)
	}
	row := fmt.Sprintf("| %s | %.2f / %.2f Mbit/s (%+.1f%%) | %.4f |", rate, res.goodput/1e6, payload/1e6, 100*(res.goodput/payload-1), res.goodput/rate.Bits())
	t.Log(row)
	return row
}

// matrixCell measures one cell of TestDelayLineMatrix and returns its
// table row.
func matrixCell(t *testing.T, rate shape.Rate, rtt time.Duration, mtu int) string {
	p := wanPair(t, Config{Prefix: ProcessPrefix() + "m", Rate: rate, RTT: rtt, DelayLine: true, MTU: mtu, Seed: 1})
	rtts := udpRTT(t, p, echoServer(t, p), 15)
	med := rtts[len(rtts)/2]
	ok := within(med.Seconds(), rtt.Seconds(), 0.05)
	if rtt == 0 {
		ok = med < time.Millisecond
	}
	if !ok {
		t.Errorf("UDP echo round trip %v, want %v within 5%% (under 1 ms at 0)", med, rtt)
	}
	ping := "-"
	if med, have := pingRTT(t, p, 15); have {
		ping = fmt.Sprintf("%.2f ms", med.Seconds()*1e3)
		if rtt > 0 && !within(med.Seconds(), rtt.Seconds(), 0.05) || rtt == 0 && med > time.Millisecond {
			t.Errorf("ping round trip %v, want %v within 5%%", med, rtt)
		}
	}
	// Warm-up: slow start and BBR's start-up take a few dozen round trips.
	warm := time.Second + 15*rtt
	res := bulk(t, p, warm, 3*time.Second)
	payload := payloadRate(rate, mtu)
	if !within(res.goodput, payload, 0.05) {
		t.Errorf("goodput %.2f Mbit/s, want %.2f within 5%%", res.goodput/1e6, payload/1e6)
	}
	toCompute, toStorage := p.Topology().LineStats()
	if toCompute.Overflow+toStorage.Overflow+toCompute.Errors+toStorage.Errors > 0 {
		t.Errorf("the delay line dropped packets: %+v, %+v", toCompute, toStorage)
	}
	row := fmt.Sprintf("| %s | %v | %.2f ms | %s | %.2f / %.2f Mbit/s (%+.1f%%) | %.2f |", rate, rtt, med.Seconds()*1e3, ping,
		res.goodput/1e6, payload/1e6, 100*(res.goodput/payload-1), res.cpuPerGbit)
	t.Log(row)
	return row
}
