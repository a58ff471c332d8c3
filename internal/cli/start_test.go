package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type startSettings struct{ Common }

func startParse(args []string, out io.Writer) (startSettings, error) {
	s := startSettings{DefaultCommon()}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.LogLevel, "log-level", s.LogLevel, "")
	fs.StringVar(&s.CPUProfile, "cpu-profile", s.CPUProfile, "")
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
		{[]string{"--cpu-profile", filepath.Join(t.TempDir(), "no", "such", "dir")}, 2, false, "no such file or directory\n"},
		{[]string{"--cpu-profile", filepath.Join(t.TempDir(), "cpu.prof")}, 0, true, ""},
	} {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		_, _, stop, code, ok := Start("prog", tc.args, startParse, f)
		stop()
		b, _ := os.ReadFile(f.Name())
		f.Close()
		if code != tc.code || ok != tc.ok || !strings.HasSuffix(string(b), tc.msg) {
			t.Errorf("%q: code %d ok %v stderr %q, want %d %v ...%q", tc.args, code, ok, b, tc.code, tc.ok, tc.msg)
		}
		if len(tc.args) == 2 && tc.args[0] == "--cpu-profile" && ok {
			if fi, err := os.Stat(tc.args[1]); err != nil || fi.Size() == 0 {
				t.Errorf("%q: no profile written after stop (%v)", tc.args, err)
			}
		}
	}
}
