package oplimits

import (
	"errors"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
)

func TestSettings(t *testing.T) {
	got, err := Settings{MaxScans: 5}.WithDefaults()
	want := Default()
	want.MaxScans = 5
	if err != nil || got != want {
		t.Errorf("WithDefaults: got %+v, %v, want %+v", got, err, want)
	}
	if _, err := (Settings{DecodeMemory: -1}).WithDefaults(); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative: got %v, want ErrInvalid", err)
	}
	if d := Default(); d.Limits() != ops.DefaultLimits() {
		t.Errorf("Default().Limits() = %+v, want ops.DefaultLimits() %+v", d.Limits(), ops.DefaultLimits())
	}
	now := time.Unix(100, 0)
	if l := Default().At(now); !l.Deadline.Equal(now.Add(DefaultOpTimeout)) {
		t.Errorf("At: deadline %v, want %v", l.Deadline, now.Add(DefaultOpTimeout))
	}
	if l := (Settings{}).At(now); !l.Deadline.IsZero() {
		t.Errorf("At without a timeout: deadline %v, want none", l.Deadline)
	}

	s := Default()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs)
	if err := fs.Parse([]string{"--max-pixels", "7", "--max-scans", "8", "--decode-memory", "9", "--max-output-bytes", "10", "--op-timeout", "1s"}); err != nil {
		t.Fatal(err)
	}
	if want := (Settings{MaxPixels: 7, MaxScans: 8, DecodeMemory: 9, MaxOutputBytes: 10, OpTimeout: time.Second}); s != want {
		t.Errorf("flags: got %+v, want %+v", s, want)
	}
}
