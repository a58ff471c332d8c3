package peerlog

import (
	"bytes"
	stdlog "log"

	"github.com/rs/zerolog"
)

// StdLogger is a standard-library logger whose every line is a warning of
// reason through l, for the ErrorLog of an http.Server a peer can reach
// (its lines are about a peer's connection: a bad request, a failed TLS
// handshake, an accept error under a connection flood).
func StdLogger(l *Limiter, log zerolog.Logger, reason string) *stdlog.Logger {
	return stdlog.New(stdWriter{l: l, log: log, reason: reason}, "", 0)
}

type stdWriter struct {
	l      *Limiter
	log    zerolog.Logger
	reason string
}

func (w stdWriter) Write(p []byte) (int, error) {
	if ev := w.l.Warn(w.log, w.reason); ev != nil {
		ev.Msg(string(bytes.TrimRight(p, "\r\n")))
	}
	return len(p), nil
}
