package synth

import (
	"fmt"

	"github.com/sophon-dl/sophon/ops"
)

// Options choose how [JPEG] renders and encodes a photo.
type Options struct {
	// Quality is the JPEG quality factor, 1..100. Zero means 90.
	Quality int
	// Detail scales texture and grain as [PhotoOptions.Detail] does. Zero
	// means 1.
	Detail float64
	// Progressive, Gray, CMYK and Subsampling (420, 422 or 444; zero means
	// 420) are passed to [ops.EncodeJPEG]. The pure-Go backend writes only
	// baseline 4:2:0 or grey and fails the others with ops.ErrUnsupported.
	Progressive bool
	Gray        bool
	CMYK        bool
	Subsampling int
}

// JPEG renders the photo for seed at w x h and encodes it.
func JPEG(seed uint64, w, h int, opt Options) ([]byte, error) {
	img := PhotoWith(seed, w, h, PhotoOptions{Detail: opt.Detail})
	data, err := ops.EncodeJPEG(img, ops.EncodeOptions{
		Quality:     opt.Quality,
		Progressive: opt.Progressive,
		Gray:        opt.Gray,
		CMYK:        opt.CMYK,
		Subsampling: opt.Subsampling,
	})
	if err != nil {
		return nil, fmt.Errorf("synth: %dx%d photo: %w", w, h, err)
	}
	return data, nil
}
