package membership

import (
	"bytes"
	"log"
	"regexp"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/peerlog"
)

// logWriter routes memberlist's standard-library log lines into zerolog.
// Memberlist tags its lines "[DEBUG]", "[WARN]", "[ERR]"; routine events on
// a healthy cluster (refuted suspicions, retried joins) carry the higher
// tags too, so they are kept at debug with the tag in the message. The
// exception is a rejected peer, one whose gossip carries another label or
// none, or cannot be decrypted with the cluster's key: that is logged at
// warn with the peer's address, since it is a misconfigured node or an
// intruder, through a rate limiter per peer: anyone who reaches the port
// can send such packets as fast as the network carries them. NB: the lines
// name memberlist as "subsystem", never "component": the agent's logger
// carries "component" already (internal/cli.Logger), and a second one
// would make a duplicate JSON key.
type logWriter struct {
	l   zerolog.Logger
	lim *peerlog.Limiter
}

// rejected matches memberlist's lines about packets and streams dropped for
// their label or encryption ("discarding packet with unacceptable label",
// "Decrypt packet failed", "No installed keys could decrypt the message",
// "Encryption is configured but remote state is not encrypted").
var rejected = regexp.MustCompile(`(?i)label|decrypt|not encrypted`)

// fromAddr finds the peer's address in memberlist's "from=host:port".
var fromAddr = regexp.MustCompile(`from=(\S+)`)

func (w logWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\r\n")
	if rejected.Match(msg) {
		var from string
		if m := fromAddr.FindSubmatch(msg); m != nil {
			from = string(m[1])
		}
		ev := w.lim.WarnPeer(w.l, peerlog.GossipRejected, from)
		if ev == nil {
			return len(p), nil
		}
		ev = ev.Str("subsystem", "memberlist")
		if from != "" {
			ev = ev.Str("peer", from)
		}
		ev.Str("reason", string(msg)).Msg("gossip from a peer rejected")
		return len(p), nil
	}
	w.l.Debug().Str("subsystem", "memberlist").Msg(string(msg))
	return len(p), nil
}

// newStdLogger returns the *log.Logger handed to memberlist; nil lim means
// one with the defaults.
func newStdLogger(l zerolog.Logger, lim *peerlog.Limiter) *log.Logger {
	if lim == nil {
		lim = peerlog.New(peerlog.Options{})
	}
	return log.New(logWriter{l: l, lim: lim}, "", 0)
}
