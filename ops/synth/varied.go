package synth

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/ops"
)

// Case is one named test image.
type Case struct {
	Name string
	Data []byte
}

// variedCases are the images [Varied] makes: sizes from 1x1 to 1024x768,
// odd and extreme aspect ratios, grey, each chroma subsampling, progressive,
// CMYK and low and high quality. Variants of the encoding use small images
// so the set stays near 1.5 MB.
type variedCase struct {
	name string
	w, h int
	opt  Options
}

var variedCases = []variedCase{
	{"500x375", 500, 375, Options{}},
	{"1024x768", 1024, 768, Options{}},
	{"375x500-portrait", 375, 500, Options{}},
	{"333x251-odd", 333, 251, Options{}},
	{"1x1", 1, 1, Options{}},
	{"17x9", 17, 9, Options{}},
	{"64x48", 64, 48, Options{}},
	{"1000x120-wide", 1000, 120, Options{}},
	{"120x1000-tall", 120, 1000, Options{}},
	{"gray-333x251", 333, 251, Options{Gray: true}},
	{"420-257x181", 257, 181, Options{Subsampling: 420}},
	{"422-257x181", 257, 181, Options{Subsampling: 422}},
	{"444-257x181", 257, 181, Options{Subsampling: 444}},
	{"progressive-333x251", 333, 251, Options{Progressive: true}},
	{"progressive-gray-150x100", 150, 100, Options{Progressive: true, Gray: true}},
	{"cmyk-160x120", 160, 120, Options{CMYK: true}},
	{"q75-500x375", 500, 375, Options{Quality: 75}},
	{"q95-500x375", 500, 375, Options{Quality: 95}},
	{"smooth-320x240", 320, 240, Options{Detail: -1}},
}

// Varied returns the varied image set the tests use, deterministic from
// seed. A case the JPEG backend cannot write (progressive, CMYK, 4:2:2 and
// 4:4:4 under the pure-Go backend) is left out, so callers should look
// cases up by name rather than by index.
func Varied(seed uint64) []Case {
	out := make([]Case, 0, len(variedCases))
	for i, c := range variedCases {
		data, err := JPEG(mix(seed^mix(uint64(i))), c.w, c.h, c.opt)
		if errors.Is(err, ops.ErrUnsupported) {
			continue
		}
		if err != nil {
			// The images are well-formed and the options valid: only a
			// broken encoder gets here.
			panic(fmt.Sprintf("synth: varied case %s: %v", c.name, err))
		}
		out = append(out, Case{Name: c.name, Data: data})
	}
	return out
}
