package wireform_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// FuzzDecode feeds Decode arbitrary bytes. It must not panic; it
// either fails with an error wrapping one of the wire sentinels or returns a
// value that re-encodes and decodes back to itself.
func FuzzDecode(f *testing.F) {
	seeds := [][]byte{nil, []byte("SOPW"), []byte("SOPW\x01\x02\x01\x00\x03\x00\x00\x00")}
	for _, v := range []ops.Value{
		ops.Encoded{},
		ops.Encoded("\xff\xd8\xff\xe0 not really a jpeg \xff\xd9"),
		make(ops.Encoded, 3000),
		ops.NewImage(0, 0),
		wirePhoto(6, 5, 3, 1),
		wirePhoto(17, 9, 0, 2),
		ops.NewTensor(0, 2, 2),
		wireSpecialTensor(),
		wireTensor(wirePhoto(8, 6, 2, 3)),
		&ops.CutJPEG{W: 100, H: 80, X: 16, Y: 8, Data: []byte("\xff\xd8 a cut \xff\xd9")},
	} {
		for _, c := range wireCodecs {
			b, err := wireform.Encode(v, c)
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, b, b[:len(b)/2], append(bytes.Clone(b), 0))
			for _, i := range []int{4, 5, 7, 8, 12, len(b) - 1} {
				bad := bytes.Clone(b)
				bad[i] ^= 0x41
				seeds = append(seeds, bad)
			}
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}

	lim := wireform.Limits{MaxPayload: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, herr := wireform.ReadHeader(b)
		v, err := wireform.Decode(b, lim)
		if err != nil {
			if v != nil {
				t.Fatalf("value %v with error %v", v, err)
			}
			for _, s := range wireSentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v wraps no wire sentinel", err)
		}
		if herr != nil {
			t.Fatalf("Decode succeeded, ReadHeader failed: %v", herr)
		}
		if v.Kind() != info.Kind || uint64(v.Size()) != info.RawLen {
			t.Fatalf("decoded %s of %d bytes, header %v", v.Kind(), v.Size(), info)
		}
		re, err := wireform.Encode(v, wireform.CodecNone)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if info.Codec == wireform.CodecNone && !bytes.Equal(re, b) {
			t.Fatalf("codec none form re-encodes differently:\n got % x\nwant % x", re, b)
		}
		back, err := wireform.Decode(re, lim)
		if err != nil {
			t.Fatalf("decode of re-encoding: %v", err)
		}
		if err := wireEqual(v, back); err != nil {
			t.Fatal(err)
		}
	})
}
