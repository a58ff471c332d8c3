package profiler

import (
	"errors"
	"testing"
)

// FuzzLoadProfile feeds arbitrary bytes to the profile file decoder: it
// must not panic, must stay within its decompression bound, and must
// return a valid profile or an error wrapping one of the file sentinels.
func FuzzLoadProfile(f *testing.F) {
	f.Add(zstdJSON(f, handProfile()))
	f.Add(zstdRaw(f, `{"version":2,"ops":["a"],"samples":[{"id":0,"raw":1,"bytes":[1,2],"op_ns":[3]}]}`))
	f.Add(zstdRaw(f, `{"version":2,"ops":["a","b"],"samples":[{"id":0,"raw":9,"bytes":[9,2,1],"op_ns":[3,4],`+
		`"cut_bytes":5,"cut_ns":1,"cut_finish_ns":2}],"resources":{"link_bytes_per_sec":1e6,"epochs":1}}`))
	f.Add(zstdRaw(f, `{"version":1,"ops":["a"],"samples":[{"id":0,"raw":1,"bytes":[1,2],"op_ns":[3]}]}`))
	f.Add(zstdRaw(f, `{"version":3}`))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeProfile(b, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrProfileCorrupt) && !errors.Is(err, ErrProfileVersion) && !errors.Is(err, ErrProfileInvalid) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded an invalid profile: %v", err)
		}
		if p.Version != ProfileVersion {
			t.Fatalf("decoded version %d", p.Version)
		}
	})
}
