package cli

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

type startSettings struct{ Common }

func startParse(args []string, out io.Writer) (startSettings, error) {
	s := startSettings{DefaultCommon()}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.LogLevel, "log-level", s.LogLevel, "")
	return s, fs.Parse(args)
}

func TestStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		ok   bool
		msg  string
	}{
		{nil, 0, true, ""},
		{[]string{"--help"}, 0, false, ""},
		{[]string{"--bogus"}, 2, false, "prog: flag provided but not defined: -bogus\n"},
		{[]string{"--log-level", "loud"}, 2, false, "prog: bad --log-level \"loud\"\n"},
	} {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		_, _, code, ok := Start("prog", tc.args, startParse, f)
		b, _ := os.ReadFile(f.Name())
		f.Close()
		if code != tc.code || ok != tc.ok || !strings.HasSuffix(string(b), tc.msg) {
			t.Errorf("%q: code %d ok %v stderr %q, want %d %v ...%q", tc.args, code, ok, b, tc.code, tc.ok, tc.msg)
		}
	}
}
