package membership

import (
	"bytes"
	"log"

	"github.com/rs/zerolog"
)

// logWriter routes memberlist's standard-library log lines into zerolog at
// debug level. Memberlist tags its lines "[DEBUG]", "[WARN]", "[ERR]"; routine
// events on a healthy cluster (refuted suspicions, retried joins) carry the
// higher tags too, so they are all kept at debug and the tag stays in the
// message.
type logWriter struct{ l zerolog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\r\n")
	w.l.Debug().Str("component", "memberlist").Msg(string(msg))
	return len(p), nil
}

// newStdLogger returns the *log.Logger handed to memberlist.
func newStdLogger(l zerolog.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}
