package membership

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/testutil"
)

// TestRejectedGossipRateLimited: memberlist's per-packet lines about a
// rejected peer are warnings with the peer's address, a burst of them and
// then none until the interval passes; routine lines stay at debug, not
// limited.
func TestRejectedGossipRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_000_000, 0)
	lim := peerlog.New(peerlog.Options{Burst: 3, Every: time.Minute, Now: func() time.Time { return now }})
	l := newStdLogger(zerolog.New(&buf), lim)
	for range 500 {
		l.Printf("[WARN] memberlist: discarding packet with unacceptable label \"x\": from=10.0.0.9:7946")
		l.Printf("[DEBUG] memberlist: Stream connection from=10.0.0.8:7946")
	}
	var warn, debug int
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		switch {
		case strings.Contains(line, `"level":"warn"`):
			warn++
			if !strings.Contains(line, `"peer":"10.0.0.9:7946"`) || !strings.Contains(line, `"peer_event":"gossip_rejected"`) {
				t.Errorf("warn line %s: want the peer and peer_event", line)
			}
		case strings.Contains(line, `"level":"debug"`):
			debug++
		}
	}
	if warn != 3 || debug != 500 {
		t.Errorf("got %d warn and %d debug lines, want the burst of 3 and all 500", warn, debug)
	}
}

// TestRejectedGossipPerPeer: a peer flooding rejected gossip spends its own
// burst; a second misconfigured node's first line is still a warning.
func TestRejectedGossipPerPeer(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_000_000, 0)
	lim := peerlog.New(peerlog.Options{Burst: 3, Every: time.Minute, Now: func() time.Time { return now }})
	l := newStdLogger(zerolog.New(&buf), lim)
	for range 500 {
		l.Printf("[WARN] memberlist: discarding packet with unacceptable label \"x\": from=10.0.0.9:7946")
	}
	l.Printf("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=10.0.0.7:7946")
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		for _, p := range []string{"10.0.0.9", "10.0.0.7"} {
			if strings.Contains(line, `"peer":"`+p+`:7946"`) {
				n[p]++
			}
		}
	}
	if n["10.0.0.9"] != 3 || n["10.0.0.7"] != 1 {
		t.Errorf("got %v warnings by peer, want the flooder's burst of 3 and the other's line", n)
	}
}

// TestGossipLogKeysUnique: the warn line of rejected gossip and the debug
// lines, written through an agent's logger (which carries "component"),
// are JSON objects without a duplicate key: memberlist is the
// "subsystem".
func TestGossipLogKeysUnique(t *testing.T) {
	var buf bytes.Buffer
	agentLog := zerolog.New(&buf).With().Timestamp().Str("component", "storage-agent").Logger() // as internal/cli.Logger
	l := newStdLogger(agentLog, nil)
	l.Printf("[WARN] memberlist: discarding packet with unacceptable label \"x\": from=10.0.0.9:7946")
	l.Printf("[DEBUG] memberlist: Stream connection from=10.0.0.8:7946")
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", n, out)
	}
	checkKeysUnique(t, out)
	for _, want := range []string{`"component":"storage-agent"`, `"subsystem":"memberlist"`, `"level":"warn"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// checkKeysUnique fails t for every line of out, JSON log lines, that has
// a duplicate key.
func checkKeysUnique(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		dups, err := testutil.DuplicateKeys([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if len(dups) > 0 {
			t.Errorf("duplicate keys %v in %s", dups, line)
		}
	}
}
