package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestWANFill (make wan-fill; root): one connection fills a long link.
// A storage agent and a compute agent on a two-node link of 500 Mbit/s
// with an 80 ms round trip (the delay line, tbf at the rate); a dataset of
// 16-40 KB JPEGs fetched raw (--plan nooff --fetch-only: the fetch path
// alone, the responses the files) over WAN_FILL_EPOCHS epochs (default
// 4). The epochs after the first (whose windows grow from --window while
// TCP ramps up) must carry the files at 90% or more of the link's
// payload rate, on average, from each one's first response to its last:
// the windows by bandwidth x round trip. Each epoch's figure is logged.
// WAN_FILL_RATE, WAN_FILL_RTT and WAN_FILL_LOSS (a fraction each way)
// change the link,
// WAN_FILL_IMAGES the files per epoch (default 8000, about 4 s at the
// rate), WAN_FILL_CC adds --tcp-congestion to both agents, and
// STORAGE_AGENT_BIN / COMPUTE_AGENT_BIN run other binaries (the figures
// before a change). Not in make test: it holds both agents and the delay
// line at 500 Mbit/s for half a minute.
func TestWANFill(t *testing.T) {
	if os.Getenv("SOPHON_WAN_FILL") == "" {
		t.Skip("make wan-fill runs this (SOPHON_WAN_FILL=1): 500 Mbit/s at 80 ms for half a minute")
	}
	if err := netns.Available(); err != nil {
		t.Skipf("needs network namespaces (root): %v", err)
	}
	rate := shape.MustParseRate(envString("WAN_FILL_RATE", "500mbit"))
	rtt, err := time.ParseDuration(envString("WAN_FILL_RTT", "80ms"))
	if err != nil {
		t.Fatal(err)
	}
	loss, err := strconv.ParseFloat(envString("WAN_FILL_LOSS", "0"), 64)
	if err != nil || loss < 0 || loss >= 1 {
		t.Fatalf("WAN_FILL_LOSS=%q: want a fraction, e.g. 0.001 for 0.1%%", os.Getenv("WAN_FILL_LOSS"))
	}
	images := envInt(t, "WAN_FILL_IMAGES", 8000)
	epochs := envInt(t, "WAN_FILL_EPOCHS", 4)
	if epochs < 2 {
		t.Fatal("WAN_FILL_EPOCHS: want at least 2 (the first is the ramp)")
	}
	bins := buildAgents(t)
	data, mean := smallDataset(t, images)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pair, err := netns.Setup(ctx, netns.Config{Rate: rate, RTT: rtt, Loss: loss, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
	})
	addr := net.JoinHostPort(pair.StorageIP, "7070")
	storageSec, computeSec, err := AgentCerts(filepath.Join(t.TempDir(), "certs"), pair.StorageIP)
	if err != nil {
		t.Fatal(err)
	}
	var cc []string
	if v := os.Getenv("WAN_FILL_CC"); v != "" {
		cc = []string{"--tcp-congestion", v}
	}
	sargs := append([]string{"--data", data, "--listen", addr, "--log-level", "warn", "--log-format", "json"}, storageSec...)
	sp := start(t, pair.Command(ctx, true, bins.storage, append(sargs, cc...)...))
	sp.waitListening(t, func(ctx context.Context) (net.Conn, error) { return pair.Dial(ctx, false, "tcp", addr) })

	reportPath := filepath.Join(t.TempDir(), "report.jsonl")
	cargs := append([]string{"--storage", addr, "--plan", "nooff", "--fetch-only", "--epochs", strconv.Itoa(epochs),
		"--report", reportPath, "--log-level", "warn", "--log-format", "json"}, computeSec...)
	run := runCompute(t, pair.Command(ctx, false, bins.compute, append(cargs, cc...)...), reportPath, nil)
	if len(run.epochs) != epochs {
		t.Fatalf("%d epochs reported, want %d", len(run.epochs), epochs)
	}
	// tbf on the TUN device charges each IP packet's length, 52 bytes of
	// which are headers (netns payloadRate); gRPC's and TLS's framing
	// (under 0.5% of 16-40 KB messages) count against the files.
	payload := rate.Bits() / 8 * float64(netns.DefaultMTU-52) / float64(netns.DefaultMTU)
	t.Logf("link %s, RTT %v, loss %g each way; %d files of %.1f KB mean per epoch; payload rate %.2f MB/s", rate, rtt, loss, images, mean/1e3, payload/1e6)
	var sum float64
	for i, e := range run.epochs {
		// The link's busy span: from the first response to the last (the
		// epoch's own time adds a round trip before the first and the
		// agent's start and end).
		span := e.LinkLastSeconds - e.LinkFirstSeconds
		if span <= 0 {
			t.Fatalf("epoch %d: no link span (first %v s, last %v s)", e.Epoch, e.LinkFirstSeconds, e.LinkLastSeconds)
		}
		fill := float64(e.BytesReceived) / span / payload
		msg := fmt.Sprintf("epoch %d: %.2f s, %.1f MB; over the link's busy %.2f s %.2f MB/s = %.1f%% of the payload rate (over the epoch %.1f%%)",
			e.Epoch, e.Seconds, float64(e.BytesReceived)/1e6, span, float64(e.BytesReceived)/span/1e6, 100*fill,
			100*float64(e.BytesReceived)/e.Seconds/payload)
		if l := e.Link; l != nil {
			msg += fmt.Sprintf("; rtt %.1f ms (min %.1f, %s), retransmits %d of %d segments, TCP in flight mean %.2f MB peak %.2f MB, window %d requests %.1f MiB (peak %.2f MB outstanding)",
				1e3*l.RTTSeconds, 1e3*l.MinRTTSeconds, l.RTTFrom, l.Retransmits, l.SegmentsOut, float64(l.InFlightMeanBytes)/1e6,
				float64(l.InFlightPeakBytes)/1e6, l.WindowCount, float64(l.WindowBytes)/(1<<20), float64(l.WindowPeakBytes)/1e6)
		}
		t.Log(msg)
		if i > 0 {
			sum += fill
		}
	}
	if mean := sum / float64(epochs-1); mean < 0.9 {
		t.Errorf("the epochs after the first carried %.1f%% of the link's payload rate on average, want at least 90%%", 100*mean)
	}
}

// envString is the environment variable name, or def when it is empty.
func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// smallDataset writes n JPEGs of 16-40 KB as an ImageFolder (hard links
// to 256 distinct files, which keeps the page cache small; the agents see
// n files) and returns its folder and the files' mean size.
func smallDataset(t *testing.T, n int) (string, float64) {
	t.Helper()
	dir, srcs := filepath.Join(t.TempDir(), "small"), t.TempDir()
	var files [][]byte
	for seed := uint64(1); len(files) < 256; seed++ {
		w := 192 + int(seed*37%97)
		b, err := synth.JPEG(seed, w, w*3/4, synth.Options{Quality: 90})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) >= 16<<10 && len(b) <= 40<<10 {
			files = append(files, b)
		}
		if seed > 4096 {
			t.Fatalf("only %d of 4096 synthetic JPEGs are 16-40 KB", len(files))
		}
	}
	var total float64
	for i := range n {
		class := filepath.Join(dir, fmt.Sprintf("c%02d", i%16))
		if err := os.MkdirAll(class, 0o755); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(srcs, fmt.Sprintf("%03d.jpg", i%len(files)))
		if i < len(files) {
			if err := os.WriteFile(src, files[i], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Link(src, filepath.Join(class, fmt.Sprintf("%06d.jpg", i))); err != nil {
			t.Fatal(err)
		}
		total += float64(len(files[i%len(files)]))
	}
	return dir, total / float64(n)
}
