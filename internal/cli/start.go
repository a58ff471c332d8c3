package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
)

// Settings are an agent's settings: they embed [Common], whose Logger
// they promote.
type Settings interface {
	Logger(prog string, out *os.File) (zerolog.Logger, error)
}

// Logger is the logger --log-level and --log-format ask for, writing to
// out and naming prog as its component.
func (c Common) Logger(prog string, out *os.File) (zerolog.Logger, error) {
	return Logger(c.LogLevel, c.LogFormat, prog, out)
}

// Start is an agent's start-up before its own work: it parses args with
// parse, which writes usage and flag errors to stderr, and makes the
// settings' logger, writing to stderr. ok is false when the agent should
// exit at once with code: 0 after --help, 2 when the flags, the config
// file or the log settings are wrong (the error is written to stderr as
// "prog: error").
func Start[T Settings](prog string, args []string, parse func([]string, io.Writer) (T, error), stderr *os.File) (s T, log zerolog.Logger, code int, ok bool) {
	s, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return s, log, 0, false
	}
	if err == nil {
		log, err = s.Logger(prog, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return s, log, 2, false
	}
	return s, log, 0, true
}
