package estimate_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/profiler/estimate"
)

// smallModel calibrates imagenet-train on four small images with ids far
// apart (a catalog's ids need not be dense).
func smallModel(t *testing.T) (*estimate.Model, []estimate.Calibrated) {
	t.Helper()
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	var cal []estimate.Calibrated
	for i, wh := range [][2]int{{96, 64}, {128, 96}, {64, 80}, {160, 120}} {
		raw, err := synth.JPEG(uint64(i+1), wh[0], wh[1], synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := jpeg.ReadHeader(raw)
		if err != nil {
			t.Fatal(err)
		}
		cal = append(cal, estimate.Calibrated{Sample: estimate.FromHeader(uint64(1000*i+7), int64(len(raw)), h), Data: raw})
	}
	m, err := estimate.Calibrate(p, 1, 0, cal, ops.DefaultLimits(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, cal
}

func TestProfileShapes(t *testing.T) {
	m, cal := smallModel(t)
	s := estimate.Sample{ID: 5, Raw: 20000, W: 300, H: 200, Components: 3}
	prof, err := m.Profile("fp", []estimate.Sample{cal[1].Sample, s})
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	// Sorted by id; the calibration sample's entry is its record.
	if len(prof.Samples) != 2 || prof.Samples[0].ID != 5 || prof.Samples[1].ID != cal[1].ID {
		t.Fatalf("got ids %d, %d; want 5, %d", prof.Samples[0].ID, prof.Samples[1].ID, cal[1].ID)
	}
	// raw, decode 300x200x3, crop 224x224x3 (crop and flip), tensor 4x.
	want := []int64{20000, 300 * 200 * 3, 224 * 224 * 3, 224 * 224 * 3, 224 * 224 * 12, 224 * 224 * 12}
	got := prof.Samples[0].Bytes
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("bytes %v, want %v", got, want)
		}
	}
	for k, c := range prof.Samples[0].Compressed {
		if c < 1 || c > got[k] {
			t.Errorf("split %d: compressed %d of %d bytes", k, c, got[k])
		}
	}
	if prof.Pipeline == "" || prof.Fingerprint != "fp" || prof.CropSplit != 2 {
		t.Errorf("header %+v", prof)
	}
}

func TestProfileErrors(t *testing.T) {
	m, _ := smallModel(t)
	if _, err := m.Profile("", []estimate.Sample{{ID: 1, Raw: 10, W: 8, H: 8}, {ID: 1, Raw: 10, W: 8, H: 8}}); !errors.Is(err, profiler.ErrDuplicate) {
		t.Errorf("duplicate ids: got %v, want ErrDuplicate", err)
	}
	if _, err := m.Profile("", []estimate.Sample{{ID: 1, Raw: 10}}); !errors.Is(err, estimate.ErrSample) {
		t.Errorf("no pixels: got %v, want ErrSample", err)
	}
	p, _ := ops.Preset("imagenet-train")
	if _, err := estimate.Calibrate(p, 1, 0, []estimate.Calibrated{{Sample: estimate.Sample{W: 8, H: 8, Raw: 3}, Data: []byte("not")}}, ops.DefaultLimits(), 0); !errors.Is(err, estimate.ErrCalibration) {
		t.Errorf("nothing recorded: got %v, want ErrCalibration", err)
	}
}

func TestScanFolder(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.WriteImageFolder(dir, synth.ImageNetLike, 3, 6, 2); err != nil {
		t.Fatal(err)
	}
	// A file with no JPEG header keeps its id (n0 sorts first in
	// class_000) and is left out; other names and loose files are no
	// samples.
	for name, data := range map[string]string{"class_000/n0.jpg": "not a jpeg", "class_001/notes.txt": "x", "loose.jpg": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	samples, paths, skipped, err := estimate.ScanFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 1 || len(samples) != 6 || len(paths) != 6 {
		t.Fatalf("got %d samples, %d skipped; want 6, 1", len(samples), skipped)
	}
	// ids: class_000 holds n0 (id 0, skipped) and samples 0, 2, 4; then
	// class_001 holds 1, 3, 5.
	wantIDs := []uint64{1, 2, 3, 4, 5, 6}
	wantFiles := []string{"n00000000.jpg", "n00000002.jpg", "n00000004.jpg", "n00000001.jpg", "n00000003.jpg", "n00000005.jpg"}
	for i, s := range samples {
		raw, _ := os.ReadFile(paths[i])
		if s.ID != wantIDs[i] || filepath.Base(paths[i]) != wantFiles[i] || s.Raw != int64(len(raw)) || s.W < 1 || s.Components != 3 {
			t.Errorf("sample %d: got %+v at %s, want id %d at %s", i, s, paths[i], wantIDs[i], wantFiles[i])
		}
	}
}

// TestFromSummary: a catalog's summary of a header gives the sample the
// header gives, MCU size included, and an unknown summary none; the
// model's estimate from either is the same entry.
func TestFromSummary(t *testing.T) {
	m, cal := smallModel(t)
	for _, c := range cal {
		h, err := jpeg.ReadHeader(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := estimate.FromSummary(c.Sample.ID, c.Sample.Raw, h.Summary())
		if !ok || got != c.Sample || got.MCUW == 0 || got.MCUH == 0 {
			t.Fatalf("from summary %+v %v, from header %+v", got, ok, c.Sample)
		}
		a, errA := m.Sample(got)
		b, errB := m.Sample(c.Sample)
		if errA != nil || errB != nil || a.CutBytes != b.CutBytes || a.Bytes[2] != b.Bytes[2] {
			t.Errorf("estimates differ: %+v (%v) and %+v (%v)", a, errA, b, errB)
		}
	}
	if _, ok := estimate.FromSummary(1, 10, jpeg.Summary{}); ok {
		t.Error("an unknown summary gave a sample")
	}
}

// TestLimitsLeaveOutHeaderBombs: a sample whose header the calibration's
// limits refuse is neither priced (Profile leaves it out, Admit counts
// it) nor run as a calibration sample (Calibrate drops it; with only
// such samples nothing is recorded).
func TestLimitsLeaveOutHeaderBombs(t *testing.T) {
	m, cal := smallModel(t)
	bombHeader, err := jpeg.ReadHeader(hostile.HeaderBomb(65535, 65535))
	if err != nil {
		t.Fatal(err)
	}
	bomb := estimate.FromHeader(99, 700, bombHeader)
	good := estimate.Sample{ID: 5, Raw: 20000, W: 300, H: 200, Components: 3}
	prof, err := m.Profile("", []estimate.Sample{good, bomb, cal[0].Sample})
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Samples) != 2 || prof.Samples[0].ID != 5 || prof.Samples[1].ID != cal[0].ID {
		t.Errorf("profile of %d samples %+v, want 5 and %d without the bomb", len(prof.Samples), prof.Samples, cal[0].ID)
	}
	kept, refused := m.Admit([]estimate.Sample{good, bomb})
	if len(kept) != 1 || len(refused) != 1 || !errors.Is(refused[0], ops.ErrTooLarge) {
		t.Errorf("Admit: kept %v, refused %v; want the good sample kept, the bomb refused TOO_LARGE", kept, refused)
	}
	p, _ := ops.Preset("imagenet-train")
	bombs := []estimate.Calibrated{{Sample: bomb, Data: hostile.HeaderBomb(65535, 65535)}}
	if _, err := estimate.Calibrate(p, 1, 0, bombs, ops.DefaultLimits(), 0); !errors.Is(err, estimate.ErrCalibration) {
		t.Errorf("calibrating on a bomb: got %v, want ErrCalibration", err)
	}
}
