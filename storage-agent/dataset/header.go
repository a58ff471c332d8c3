package dataset

import (
	"github.com/sophon-dl/sophon/ops/jpeg"
)

// MaxHeaderPrefix bounds the bytes of a sample read for its JPEG header at
// indexing: a header (every marker before the first SOS) that does not fit
// in them is unknown. 64 KiB holds the usual JFIF, EXIF and ICC segments.
const MaxHeaderPrefix = 64 << 10

// summarize is the summary of the header at the start of b, a prefix of a
// sample; unknown when it does not parse.
func summarize(b []byte) jpeg.Summary {
	h, err := jpeg.ReadHeader(b)
	if err != nil {
		return jpeg.Summary{}
	}
	return h.Summary()
}

// headerSample reads the header summary of s from at most MaxHeaderPrefix
// bytes of its file (checking it is the one indexed) into buf; a sample
// that cannot be read has an unknown header (its hash, from the index,
// catches the change when it is read).
func (d *Dataset) headerSample(s *sample, buf []byte) jpeg.Summary {
	p := buf[:min(int64(len(buf)), s.size, MaxHeaderPrefix)]
	if s.shard >= 0 {
		if readFull(d.shards[s.shard].r, p, s.off) != nil {
			return jpeg.Summary{}
		}
		return summarize(p)
	}
	f, _, err := openChecked(d.root, s.rel, &s.id)
	if err != nil {
		return jpeg.Summary{}
	}
	defer f.Close()
	if readFull(f, p, 0) != nil {
		return jpeg.Summary{}
	}
	return summarize(p)
}
