package synthetic_test

import (
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/synthetic"
)

// The compressed-crop variant inserts the encode and the decode after the
// flip, keeps every other split, and is what the planners plan: with the
// link binding and the storage CPU plentiful, optimal and SOPHON send most
// samples as the crop's JPEG (split 4), optimal a small crop box's sample
// as the JPEG cut where that is smaller.
func TestCompressed(t *testing.T) {
	for _, kind := range []string{"openimages-like", "imagenet-like"} {
		for _, q := range synthetic.CompressedQualities(kind) {
			base := synthetic.ProfileCut(kind, 500, 3)
			p, err := synthetic.Compressed(base, kind, q, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("%s q%d: %v", kind, q, err)
			}
			if !slices.Equal(p.Ops, synthetic.CompressedPipeline) {
				t.Fatalf("%s q%d: ops %v", kind, q, p.Ops)
			}
			var jpeg, crop float64
			for i, s := range p.Samples {
				b := base.Samples[i]
				if !slices.Equal(s.Bytes[:4], b.Bytes[:4]) || !slices.Equal(s.Bytes[5:], b.Bytes[3:]) || s.CutBytes != b.CutBytes {
					t.Fatalf("%s q%d sample %d: bytes %v from %v", kind, q, i, s.Bytes, b.Bytes)
				}
				if s.Compressed[4] != s.Bytes[4] || s.OpNS[3] <= 0 || s.OpNS[4] <= 0 {
					t.Fatalf("%s q%d sample %d: JPEG %d compressed to %d, encode %d ns, decode %d ns", kind, q, i, s.Bytes[4], s.Compressed[4], s.OpNS[3], s.OpNS[4])
				}
				jpeg += float64(s.Bytes[4])
				crop += float64(s.Bytes[2])
			}
			if r := jpeg / crop; r < 0.05 || r > 0.5 {
				t.Errorf("%s q%d: JPEG/crop %.3f", kind, q, r)
			}
			r := policy.Resources{LinkBytesPerSec: 500e6 / 8, StorageCores: 32, ComputeCores: 8}
			for _, pol := range []func(policy.Instance) (policy.Plan, error){policy.Optimal, policy.SOPHON} {
				plan, err := pol(policy.OneNode(p, r))
				if err != nil {
					t.Fatal(err)
				}
				h := plan.Histogram(p.N())
				at, cut := h[1+4], h[0]
				t.Logf("%s q%d %s: %d of %d at split 4, %d at the cut, %.3f s (%s)", kind, q, plan.Policy, at, len(p.Samples), cut, plan.Pred.Seconds, plan.Pred.Bottleneck)
				if 2*(at+cut) <= len(p.Samples) || 3*at <= len(p.Samples) {
					t.Errorf("%s q%d %s: %d of %d samples at split 4 and %d at the cut, want most at one of the two and a third at split 4", kind, q, plan.Policy, at, len(p.Samples), cut)
				}
			}
		}
	}
	if _, err := synthetic.Compressed(synthetic.Profile("imagenet-like", 5, 1), "imagenet-like", 42, 1); err == nil {
		t.Error("quality 42: no error")
	}
}
