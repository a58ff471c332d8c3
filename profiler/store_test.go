package profiler

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func handProfile() *Profile {
	return &Profile{
		Version:     ProfileVersion,
		Fingerprint: "0123456789abcdef",
		Pipeline:    "imagenet-train@1f8b59f902fd",
		Ops:         []string{"decode", "random_resized_crop"},
		Samples: []SampleProfile{
			{ID: 0, Raw: 100, Bytes: []int64{100, 3000, 150}, Compressed: []int64{100, 2000, 140},
				CompressNS: []int64{5, 50, 6}, DecompressNS: []int64{4, 40, 3}, OpNS: []int64{1000, 300},
				CutBytes: 60, CutNS: 20, CutFinishNS: 700},
			{ID: 3, Raw: 50, Bytes: []int64{50, 900, 150}, OpNS: []int64{400, 0}},
		},
		Resources: &MeasuredResources{LinkBytesPerSec: 53.75e6, StorageSpeed: 0.9, StorageCores: 32,
			ComputeCores: 8, GPUSamplesPerSec: 1150, Epochs: 2.5},
	}
}

func zstdJSON(t testing.TB, v any) []byte {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(js, nil)
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "profile.zst")
	want := handProfile()
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	// Saving again replaces the file atomically and leaves no temporary.
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("got %d files in the directory, want 1", len(ents))
	}
	got, err := Load(path, want.Fingerprint, want.Pipeline)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: got %+v, want %+v", got, want)
	}
	if _, err := Load(path, "", ""); err != nil {
		t.Errorf("load without keys: %v", err)
	}

	var me *MismatchError
	if _, err := Load(path, "other", want.Pipeline); !errors.Is(err, ErrProfileMismatch) || !errors.As(err, &me) || me.Field != "fingerprint" {
		t.Errorf("other dataset: got %v, want a fingerprint MismatchError", err)
	}
	if _, err := Load(path, want.Fingerprint, "imagenet-val@x"); !errors.Is(err, ErrProfileMismatch) || !errors.As(err, &me) || me.Field != "pipeline" {
		t.Errorf("other pipeline: got %v, want a pipeline MismatchError", err)
	}
	if _, err := Load(filepath.Join(dir, "absent"), "", ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: got %v, want ErrNotExist", err)
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	dir := t.TempDir()
	p := handProfile()
	p.Samples[1].OpNS = []int64{1}
	if err := Save(filepath.Join(dir, "p"), p); !errors.Is(err, ErrProfileInvalid) {
		t.Errorf("got %v, want ErrProfileInvalid", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("got %d files after a refused save, want 0", len(ents))
	}
}

func TestLoadErrors(t *testing.T) {
	good := handProfile()
	v1 := *good
	v1.Version = 1
	invalid := handProfile()
	invalid.Samples[0].Compressed[1] = 5000
	valid, err := os.ReadFile(saveTemp(t, good))
	if err != nil {
		t.Fatal(err)
	}
	// Valid but for its size: 2 MiB of whitespace, over the 1 MiB bound.
	bomb := zstdRaw(t, `{"version":2`+strings.Repeat(" ", 2<<20)+`}`)
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"version 1", zstdJSON(t, &v1), ErrProfileVersion},
		{"version 1 without cut", zstdRaw(t, `{"version":1,"ops":["a"],"samples":[{"id":0,"raw":1,"bytes":[1,2],"op_ns":[3]}]}`), ErrProfileVersion},
		{"no version", zstdJSON(t, map[string]any{"ops": []string{}}), ErrProfileVersion},
		{"future format", zstdJSON(t, map[string]any{"version": 9, "columns": 1}), ErrProfileVersion},
		{"unknown field", zstdJSON(t, map[string]any{"version": ProfileVersion, "extra": 1}), ErrProfileCorrupt},
		{"inconsistent", zstdJSON(t, invalid), ErrProfileInvalid},
		{"not zstd", []byte(`{"version":2}`), ErrProfileCorrupt},
		{"empty", nil, ErrProfileCorrupt},
		{"truncated", valid[:len(valid)/2], ErrProfileCorrupt},
		{"flipped", flip(valid, len(valid)/2), ErrProfileCorrupt},
		{"not json", zstdJSON(t, "just a string"), ErrProfileCorrupt},
		{"trailing", zstdRaw(t, `{"version":2,"ops":[],"samples":[]} {}`), ErrProfileCorrupt},
		{"over the limit", bomb, ErrProfileCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeProfile(tc.data, 1<<20)
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
			path := filepath.Join(t.TempDir(), "p")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.name == "over the limit" {
				// Within Load's default bound, it is a valid empty profile.
				if _, err := Load(path, "", ""); err != nil {
					t.Errorf("Load: got %v, want success", err)
				}
				return
			}
			if _, err := Load(path, "", ""); !errors.Is(err, tc.want) {
				t.Errorf("Load: got %v, want %v", err, tc.want)
			}
		})
	}
}

func zstdRaw(t testing.TB, s string) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll([]byte(s), nil)
}

func flip(b []byte, i int) []byte {
	out := bytes.Clone(b)
	out[i] ^= 0xff
	return out
}

func saveTemp(t testing.TB, p *Profile) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p")
	if err := Save(path, p); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(p *Profile)
		valid bool
	}{
		{"as made", func(*Profile) {}, true},
		{"no samples", func(p *Profile) { p.Samples = nil }, true},
		{"no ops", func(p *Profile) {
			p.Ops = nil
			p.Samples = []SampleProfile{{ID: 1, Raw: 3, Bytes: []int64{3}, OpNS: []int64{}}}
		}, true},
		{"unnamed op", func(p *Profile) { p.Ops[1] = "" }, false},
		{"short bytes", func(p *Profile) { p.Samples[0].Bytes = p.Samples[0].Bytes[:2] }, false},
		{"long op_ns", func(p *Profile) { p.Samples[1].OpNS = []int64{1, 2, 3} }, false},
		{"short compressed", func(p *Profile) { p.Samples[0].Compressed = []int64{1} }, false},
		{"short compress_ns", func(p *Profile) { p.Samples[0].CompressNS = []int64{1, 2} }, false},
		{"negative raw", func(p *Profile) { p.Samples[0].Raw, p.Samples[0].Bytes[0] = -1, -1 }, false},
		{"raw differs", func(p *Profile) { p.Samples[0].Raw = 99 }, false},
		{"negative op", func(p *Profile) { p.Samples[1].OpNS[0] = -4 }, false},
		{"negative decompress", func(p *Profile) { p.Samples[0].DecompressNS[2] = -1 }, false},
		{"compressed grows", func(p *Profile) { p.Samples[0].Compressed[2] = 151 }, false},
		{"unsorted", func(p *Profile) { p.Samples[0].ID = 5 }, false},
		{"no cut", func(p *Profile) { p.Samples[0].CutBytes, p.Samples[0].CutNS, p.Samples[0].CutFinishNS = 0, 0, 0 }, true},
		{"free cut", func(p *Profile) { p.Samples[1].CutBytes = 20 }, true},
		{"cut ns without bytes", func(p *Profile) { p.Samples[1].CutNS = 5 }, false},
		{"cut finish without bytes", func(p *Profile) { p.Samples[1].CutFinishNS = 5 }, false},
		{"negative cut bytes", func(p *Profile) { p.Samples[0].CutBytes = -1 }, false},
		{"negative cut ns", func(p *Profile) { p.Samples[0].CutNS = -1 }, false},
		{"negative cut finish", func(p *Profile) { p.Samples[0].CutFinishNS = -1 }, false},
		{"cut in one op", func(p *Profile) {
			p.Ops = p.Ops[:1]
			p.Samples = []SampleProfile{{ID: 1, Raw: 3, Bytes: []int64{3, 9}, OpNS: []int64{4}, CutBytes: 2}}
		}, false},
		{"no resources", func(p *Profile) { p.Resources = nil }, true},
		{"zero resources", func(p *Profile) { p.Resources = &MeasuredResources{} }, true},
		{"negative link", func(p *Profile) { p.Resources.LinkBytesPerSec = -1 }, false},
		{"infinite cores", func(p *Profile) { p.Resources.ComputeCores = math.Inf(1) }, false},
		{"NaN speed", func(p *Profile) { p.Resources.StorageSpeed = math.NaN() }, false},
		{"negative epochs", func(p *Profile) { p.Resources.Epochs = -1 }, false},
		{"duplicate", func(p *Profile) { p.Samples[0].ID = 3 }, false},
		{"crop split", func(p *Profile) { p.CropSplit = len(p.Ops) }, true},
		{"crop split past the ops", func(p *Profile) { p.CropSplit = len(p.Ops) + 1 }, false},
		{"negative crop split", func(p *Profile) { p.CropSplit = -1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := handProfile()
			tc.edit(p)
			err := p.Validate()
			if tc.valid && err != nil {
				t.Errorf("got %v, want valid", err)
			}
			if !tc.valid && !errors.Is(err, ErrProfileInvalid) {
				t.Errorf("got %v, want ErrProfileInvalid", err)
			}
		})
	}
	var nilp *Profile
	if err := nilp.Validate(); !errors.Is(err, ErrProfileInvalid) {
		t.Errorf("nil profile: got %v", err)
	}
}
