package ops_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// TestSplitInvariance is invariant 1: for every preset, every split k,
// every image of a varied set and several epochs, ops[0:k] -> wire ->
// ops[k:n] equals all n ops run at once, byte for byte.
func TestSplitInvariance(t *testing.T) {
	cases := synth.Varied(7)
	codecs := []wireform.Codec{wireform.CodecNone, wireform.CodecZstd, wireform.CodecS2}
	for _, name := range testedPresets() {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				for epoch := uint64(0); epoch < 3; epoch++ {
					key := ops.Key{Seed: 42, Epoch: epoch, Sample: uint64(len(c.Name))*1000 + epoch}
					full, fullErr := p.Run(key, ops.Encoded(c.Data), 0, p.Len())
					if fullErr != nil {
						// Only a typed refusal is acceptable (e.g. a CMYK
						// JPEG the build cannot convert), and every split must
						// refuse the same way.
						if !errors.Is(fullErr, ops.ErrUnsupported) {
							t.Fatalf("%s epoch %d: %v", c.Name, epoch, fullErr)
						}
					}
					want := []byte(nil)
					if fullErr == nil {
						want = valueBytes(full)
					}
					for k := 0; k <= p.Len(); k++ {
						codec := codecs[(k+int(epoch))%len(codecs)]
						got, err := runSplit(p, key, c.Data, k, codec)
						if fullErr != nil {
							if !errors.Is(err, ops.ErrUnsupported) {
								t.Errorf("%s epoch %d split %d: got %v, want the unsplit error %v", c.Name, epoch, k, err, fullErr)
							}
							continue
						}
						if err != nil {
							t.Fatalf("%s epoch %d split %d (%s): %v", c.Name, epoch, k, codec, err)
						}
						if !bytes.Equal(valueBytes(got), want) {
							t.Errorf("%s epoch %d split %d (%s): output differs from the unsplit run", c.Name, epoch, k, codec)
						}
					}
				}
			}
		})
	}
}

func runSplit(p *ops.Pipeline, key ops.Key, raw []byte, k int, codec wireform.Codec) (ops.Value, error) {
	mid, err := p.Run(key, ops.Encoded(raw), 0, k)
	if err != nil {
		return nil, err
	}
	w, err := wireform.Encode(mid, codec)
	if err != nil {
		return nil, err
	}
	back, err := wireform.Decode(w, wireform.Limits{})
	if err != nil {
		return nil, err
	}
	return p.Run(key, back, k, p.Len())
}

// TestCutSplitInvariance is invariant 1 for the JPEG-domain crop: for every
// preset that has the cut split, every case of cutCases and several epochs,
// Cut -> wire -> Run from SplitCut equals the whole run byte for byte; a
// file the cut declines fails with ErrCannotCut and its fallback (raw,
// split 0) equals the whole run too. The pure-Go build declines every cut.
func TestCutSplitInvariance(t *testing.T) {
	cases := cutCases(t)
	codecs := []wireform.Codec{wireform.CodecNone, wireform.CodecZstd, wireform.CodecS2}
	epochs := uint64(4)
	if testing.Short() {
		epochs = 2
	}
	var presets int
	for _, name := range testedPresets() {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if !p.CanCut() {
			continue
		}
		presets++
		t.Run(name, func(t *testing.T) {
			var cuts, declines int
			var cutBytes, rawBytes int64
			for _, c := range cases {
				var caseCuts int
				for epoch := range epochs {
					key := cutKey(c.name, epoch)
					codec := codecs[int(epoch)%len(codecs)]
					cut, declined, err := checkCut(p, key, c.data, codec, ops.Limits{})
					if err != nil {
						t.Fatalf("%s epoch %d (%s): %v", c.name, epoch, codec, err)
					}
					if declined != nil {
						declines++
						if c.expect == cutSome && epoch == 0 {
							t.Logf("%s epoch %d: %v", c.name, epoch, declined)
						}
						continue
					}
					cuts++
					caseCuts++
					cutBytes += int64(len(cut.Data))
					rawBytes += int64(len(c.data))
				}
				switch {
				case !cgoCut() && caseCuts > 0:
					t.Errorf("%s: the %s build cut it %d times; it must decline", c.name, ops.JPEGBackend, caseCuts)
				case cgoCut() && c.expect == cutSome && caseCuts == 0:
					t.Errorf("%s: declined in every epoch, want some cuts", c.name)
				case c.expect == cutDecline && caseCuts > 0:
					t.Errorf("%s: cut %d times, want it declined", c.name, caseCuts)
				}
			}
			t.Logf("%d cuts, %d declines over %d cases; cuts average %.1f%% of their files", cuts, declines, len(cases), 100*float64(cutBytes)/float64(max(rawBytes, 1)))
		})
	}
	if presets == 0 {
		t.Fatal("no preset has the cut split")
	}
}

// checkCut cuts raw for key and checks the cut split, or the fallback when
// the cut declines, against the whole run. It returns the cut, or the
// decline's error; err reports a broken invariant.
func checkCut(p *ops.Pipeline, key ops.Key, raw []byte, codec wireform.Codec, lim ops.Limits) (cut *ops.CutJPEG, declined, err error) {
	full, fullErr := p.RunLimited(key, ops.Encoded(raw), 0, p.Len(), lim)
	cut, cutErr := p.Cut(key, ops.Encoded(raw), lim)
	if cutErr != nil {
		var se *ops.SampleError
		if !errors.As(cutErr, &se) || se.Sample != key.Sample {
			return nil, nil, fmt.Errorf("cut error %v does not name sample %d", cutErr, key.Sample)
		}
		if !errors.Is(cutErr, ops.ErrCannotCut) {
			// Only the decode's own failures, the same as the whole run's.
			if fullErr == nil || cutErrClass(cutErr) != cutErrClass(fullErr) {
				return nil, nil, fmt.Errorf("cut fails with %v, the whole run with %v", cutErr, fullErr)
			}
			return nil, cutErr, nil
		}
		if cut != nil {
			return nil, nil, fmt.Errorf("a declined cut returned a value")
		}
		// The fallback: raw over the wire, every op on the other side.
		got, err := runSplitLimited(p, key, raw, 0, codec, lim)
		if (err != nil) != (fullErr != nil) || err != nil && cutErrClass(err) != cutErrClass(fullErr) {
			return nil, nil, fmt.Errorf("fallback gives %v, the whole run %v", err, fullErr)
		}
		if err == nil && !bytes.Equal(valueBytes(got), valueBytes(full)) {
			return nil, nil, fmt.Errorf("fallback output differs from the whole run")
		}
		return nil, cutErr, nil
	}
	if fullErr != nil {
		return nil, nil, fmt.Errorf("cut succeeds where the whole run fails with %v", fullErr)
	}
	if cut.W <= 0 || cut.H <= 0 || len(cut.Data) >= len(raw) {
		return nil, nil, fmt.Errorf("cut %dx%d+%d+%d of %d bytes from a %d-byte file", cut.W, cut.H, cut.X, cut.Y, len(cut.Data), len(raw))
	}
	w, err := wireform.Encode(cut, codec)
	if err != nil {
		return nil, nil, err
	}
	back, err := wireform.Decode(w, wireform.Limits{})
	if err != nil {
		return nil, nil, err
	}
	got, err := p.RunLimited(key, back, ops.SplitCut, p.Len(), lim)
	if err != nil {
		return nil, nil, fmt.Errorf("run from the cut: %v", err)
	}
	if !bytes.Equal(valueBytes(got), valueBytes(full)) {
		return nil, nil, fmt.Errorf("output from the cut %dx%d+%d+%d differs from the whole run", cut.W, cut.H, cut.X, cut.Y)
	}
	return cut, nil, nil
}

func runSplitLimited(p *ops.Pipeline, key ops.Key, raw []byte, k int, codec wireform.Codec, lim ops.Limits) (ops.Value, error) {
	mid, err := p.RunLimited(key, ops.Encoded(raw), 0, k, lim)
	if err != nil {
		return nil, err
	}
	w, err := wireform.Encode(mid, codec)
	if err != nil {
		return nil, err
	}
	back, err := wireform.Decode(w, wireform.Limits{})
	if err != nil {
		return nil, err
	}
	return p.RunLimited(key, back, k, p.Len(), lim)
}

// TestRunIndependentOfWorkers runs the same samples from many goroutines
// in scrambled order and checks every output equals the sequential one.
func TestRunIndependentOfWorkers(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := synth.JPEG(3, 320, 240, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	want := make([][32]byte, n)
	for i := range want {
		v, err := p.Run(ops.Key{Seed: 1, Epoch: 2, Sample: uint64(i)}, ops.Encoded(raw), 0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		want[i] = sha256.Sum256(valueBytes(v))
	}
	got := make([][32]byte, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := n - 1 - w; i >= 0; i -= 4 {
				v, err := p.Run(ops.Key{Seed: 1, Epoch: 2, Sample: uint64(i)}, ops.Encoded(raw), 0, p.Len())
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = sha256.Sum256(valueBytes(v))
			}
		})
	}
	wg.Wait()
	distinct := map[[32]byte]bool{}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d: concurrent output differs from sequential", i)
		}
		distinct[want[i]] = true
	}
	// The same bytes under different sample ids must see different draws.
	if len(distinct) < n/2 {
		t.Errorf("only %d distinct outputs for %d sample ids: draws are not per sample", len(distinct), n)
	}
}

// TestEpochsDraw checks that random ops draw anew each epoch while
// deterministic pipelines do not change.
func TestEpochsDraw(t *testing.T) {
	raw, err := synth.JPEG(5, 400, 300, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		preset   string
		wantSame bool
	}{{"imagenet-train", false}, {"imagenet-train-fast", false}, {"imagenet-val", true}} {
		p, err := ops.Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[[32]byte]bool{}
		for e := uint64(0); e < 6; e++ {
			v, err := p.Run(ops.Key{Seed: 9, Epoch: e, Sample: 1}, ops.Encoded(raw), 0, p.Len())
			if err != nil {
				t.Fatal(err)
			}
			seen[sha256.Sum256(valueBytes(v))] = true
		}
		if same := len(seen) == 1; same != tc.wantSame {
			t.Errorf("%s: %d distinct outputs over 6 epochs, want same=%v", tc.preset, len(seen), tc.wantSame)
		}
	}
}

// TestSplitInvarianceOnBadInput checks that damaged JPEGs fail (or
// succeed) the same way whether the pipeline runs whole, where decode and
// crop are fused and only the crop is decoded, or split after decode, where
// the whole image is.
func TestSplitInvarianceOnBadInput(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	sentinels := []error{ops.ErrEmpty, ops.ErrNotJPEG, ops.ErrTruncated, ops.ErrCorrupt, ops.ErrTooLarge, ops.ErrUnsupported}
	class := func(err error) error {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return s
			}
		}
		return err
	}
	var failed, total int
	for _, c := range synth.Varied(11) {
		if len(c.Data) < 2000 {
			continue
		}
		var bad [][]byte
		for _, frac := range []float64{0.3, 0.6, 0.9, 0.99} {
			bad = append(bad, c.Data[:int(frac*float64(len(c.Data)))])
		}
		for _, frac := range []float64{0.2, 0.5, 0.8, 0.97} {
			b := bytes.Clone(c.Data)
			at := int(frac * float64(len(b)))
			for i := at; i < at+16 && i < len(b)-2; i++ {
				b[i] ^= 0x5a
			}
			bad = append(bad, b)
		}
		for i, b := range bad {
			for epoch := uint64(0); epoch < 3; epoch++ {
				key := ops.Key{Seed: 3, Epoch: epoch, Sample: uint64(i)}
				whole, errWhole := p.Run(key, ops.Encoded(b), 0, p.Len())
				split, errSplit := runSplit(p, key, b, 1, wireform.CodecNone)
				total++
				if errWhole != nil {
					failed++
				}
				if class(errWhole) != class(errSplit) {
					t.Errorf("%s variant %d epoch %d: whole run gives %v, split after decode gives %v", c.Name, i, epoch, errWhole, errSplit)
					continue
				}
				if errWhole == nil && !bytes.Equal(valueBytes(whole), valueBytes(split)) {
					t.Errorf("%s variant %d epoch %d: outputs differ", c.Name, i, epoch)
				}
			}
		}
	}
	t.Logf("%d of %d damaged runs failed, identically whole and split", failed, total)
	if failed == 0 || failed == total {
		t.Errorf("%d of %d damaged inputs failed: the corpus does not exercise both outcomes", failed, total)
	}
}
