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
	StartCPUProfile() (stop func(), err error)
}

// Logger is the logger --log-level and --log-format ask for, writing to
// out and naming prog as its component.
func (c Common) Logger(prog string, out *os.File) (zerolog.Logger, error) {
	return Logger(c.LogLevel, c.LogFormat, prog, out)
}

// Start is an agent's start-up before its own work: it parses args with
// parse, which writes usage and flag errors to stderr, and makes the
// settings' logger, writing to stderr, and starts the CPU profile
// --cpu-profile asks for; stop ends it (the agent defers it). ok is false
// when the agent should exit at once with code: 0 after --help, 2 when
// the flags, the config file, the log settings or the profile's file are
// wrong (the error is written to stderr as "prog: error"); stop is then a
// no-op.
func Start[T Settings](prog string, args []string, parse func([]string, io.Writer) (T, error), stderr *os.File) (s T, log zerolog.Logger, stop func(), code int, ok bool) {
	stop = func() {}
	s, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return s, log, stop, 0, false
	}
	if err == nil {
		log, err = s.Logger(prog, stderr)
	}
	if err == nil {
		stop, err = s.StartCPUProfile()
	}
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return s, log, func() {}, 2, false
	}
	return s, log, stop, 0, true
}
