package hostile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
)

// TestCorpus runs every case through the imagenet-train preset under
// ops.DefaultLimits: the error must wrap the case's sentinel, name the
// sample, and come back within a second.
func TestCorpus(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	cs := Corpus()
	total, cats, names := 0, map[string]bool{}, map[string]bool{}
	for _, c := range cs {
		total += len(c.Data)
		cats[c.Category] = true
		if names[c.Name] {
			t.Errorf("duplicate case %s", c.Name)
		}
		names[c.Name] = true
	}
	if len(cs) < 40 || len(cats) < 12 || total > 5<<20 {
		t.Errorf("corpus has %d cases in %d categories, %d bytes; want >= 40 in >= 12, < 5 MiB", len(cs), len(cats), total)
	}
	for i, c := range cs {
		t.Run(c.Name, func(t *testing.T) {
			key := ops.Key{Seed: 1, Sample: uint64(1000 + i)}
			start := time.Now()
			_, err := p.RunLimited(key, ops.Encoded(c.Data), 0, p.Len(), ops.DefaultLimits())
			d := time.Since(start)
			if d > time.Second {
				t.Errorf("took %v, want < 1s", d)
			}
			if ops.JPEGBackend != "libjpeg-turbo" {
				// image/jpeg differs in what it accepts; it must still
				// fail with a sentinel.
				return
			}
			switch {
			case c.Want == nil && err != nil:
				t.Fatalf("got %v, want success", err)
			case c.Want == nil:
				return
			case !errors.Is(err, c.Want):
				t.Fatalf("got %v, want %v", err, c.Want)
			}
			if want := fmt.Sprintf("sample %d: ", key.Sample); !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
			t.Logf("%v (%v)", err, d.Round(time.Microsecond))
		})
	}
	t.Logf("%d cases in %d categories, %d bytes", len(cs), len(cats), total)
}

// FuzzRunLimited runs arbitrary bytes, seeded with the corpus, through the
// decode-led presets under ops.DefaultLimits and a deadline: nothing may
// panic, every error must wrap one of the ops sentinels a decode returns.
func FuzzRunLimited(f *testing.F) {
	for _, c := range Corpus() {
		f.Add(c.Data)
	}
	var ps []*ops.Pipeline
	for _, name := range []string{"imagenet-train", "imagenet-val"} {
		p, err := ops.Preset(name)
		if err != nil {
			f.Fatal(err)
		}
		ps = append(ps, p)
	}
	sentinels := []error{ops.ErrEmpty, ops.ErrNotJPEG, ops.ErrTruncated, ops.ErrCorrupt, ops.ErrTooLarge, ops.ErrUnsupported, ops.ErrDeadline}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := ops.DefaultLimits()
		lim.Deadline = time.Now().Add(2 * time.Second)
		for i, p := range ps {
			_, err := p.RunLimited(ops.Key{Sample: uint64(i)}, ops.Encoded(data), 0, p.Len(), lim)
			if err == nil {
				continue
			}
			ok := false
			for _, s := range sentinels {
				ok = ok || errors.Is(err, s)
			}
			if !ok {
				t.Fatalf("%s: error %q wraps none of the sentinels", p.Name(), err)
			}
		}
	})
}

// TestHeaderBomb: a 65535x65535 header bomb is under a kilobyte, its
// header parses as the frame it declares, and decoding it is refused.
func TestHeaderBomb(t *testing.T) {
	b := HeaderBomb(65535, 65535)
	h, err := ops.ReadJPEGHeader(b)
	if err != nil || h.W != 65535 || h.H != 65535 || h.MCUW != 16 || len(b) > 1024 {
		t.Fatalf("HeaderBomb: %d bytes, header %+v, %v; want 65535x65535, MCU 16, under 1 KiB", len(b), h, err)
	}
	if _, err := ops.DecodeJPEG(b, ops.DecodeLimits{}); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("decode: got %v, want TOO_LARGE", err)
	}
}
