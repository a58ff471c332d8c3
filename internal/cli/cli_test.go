package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type settings struct {
	Config string `yaml:"config"`
	Name   string `yaml:"name"`
	Count  int    `yaml:"count"`
	Peers  List   `yaml:"peers"`
}

func defaults() settings { return settings{Name: "default", Count: 1} }

func flags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.Config, "config", s.Config, "")
	fs.StringVar(&s.Name, "name", s.Name, "")
	fs.IntVar(&s.Count, "count", s.Count, "")
	fs.Var(&s.Peers, "peers", "")
	return fs
}

func config(s *settings) string { return s.Config }

func TestParse(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("name: fromfile\ncount: 7\npeers: [a:1, b:2]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		name  string
		count int
		peers []string
	}{
		{nil, "default", 1, nil},
		{[]string{"--peers", " x:1, ,y:2 "}, "default", 1, []string{"x:1", "y:2"}},
		{[]string{"--config", file}, "fromfile", 7, []string{"a:1", "b:2"}},
		{[]string{"--config", file, "--count", "3", "--peers", "z:9"}, "fromfile", 3, []string{"z:9"}},
	} {
		s, err := Parse(tc.args, defaults, flags, config)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if s.Name != tc.name || s.Count != tc.count || !slices.Equal(s.Peers, tc.peers) {
			t.Errorf("%v: got %+v, want name %q count %d peers %v", tc.args, s, tc.name, tc.count, tc.peers)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]string{"--config", bad}, defaults, flags, config); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown key: got %v", err)
	}
	if _, err := Parse([]string{"--config", filepath.Join(dir, "missing")}, defaults, flags, config); err == nil {
		t.Error("missing config file: no error")
	}
	var l List
	if err := l.Set("p:1,q:2"); err != nil || !slices.Equal(l, List{"p:1", "q:2"}) || l.String() != "p:1,q:2" {
		t.Errorf("List.Set: %v %v", l, err)
	}
}

func TestLogger(t *testing.T) {
	if _, err := Logger("info", "json", "x", os.Stderr); err != nil {
		t.Error(err)
	}
	if _, err := Logger("loud", "json", "x", os.Stderr); err == nil {
		t.Error("bad level accepted")
	}
	if _, err := Logger("info", "xml", "x", os.Stderr); err == nil {
		t.Error("bad format accepted")
	}
}
