package profiler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
)

func TestMeasureComputeRate(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 3)
	samples := make([][]byte, len(imgs))
	for i, im := range imgs {
		samples[i] = im.raw
	}
	rate, err := MeasureComputeRate(t.Context(), p, samples, 200*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 || rate > 1e6 {
		t.Errorf("got %v samples/s, want a positive, plausible rate", rate)
	}
	t.Logf("imagenet-train: %.0f samples/s on 2 workers", rate)

	if _, err := MeasureComputeRate(t.Context(), p, nil, time.Millisecond, 1); !errors.Is(err, ErrNoMeasurement) {
		t.Errorf("no samples: got %v, want ErrNoMeasurement", err)
	}
	lim := ops.DefaultLimits()
	lim.MaxPixels = 100
	if _, err := MeasureComputeRateLimited(t.Context(), p, samples, 20*time.Millisecond, 2, lim, time.Minute); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("above the pixel limit: got %v, want ErrTooLarge", err)
	}
	if _, err := MeasureComputeRate(t.Context(), p, [][]byte{[]byte("junk")}, 20*time.Millisecond, 2); !errors.Is(err, ops.ErrNotJPEG) {
		t.Errorf("junk: got %v, want ErrNotJPEG", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := MeasureComputeRate(ctx, p, samples, time.Second, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
}
