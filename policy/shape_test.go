package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/policy/synthetic"
)

// ample is the paper's setting with storage CPU to spare: 430 Mbit/s
// effective, 32 storage cores, 8 compute cores, a GPU at 1150 img/s.
var ample = Resources{LinkBytesPerSec: 430e6 / 8, StorageCores: 32, ComputeCores: 8, GPUSamplesPerSec: 1150}

// limited returns ample with storage CPU cut to a quarter of what SOPHON
// uses under ample: SOPHON's plan keeps S/T storage cores busy on average
// (S its storage CPU seconds, T its predicted epoch), so the limited
// storage has S/(4T) cores, i.e. capacity S/4 per epoch of length T.
func limited(so Plan) Resources {
	r := ample
	r.StorageCores = so.Pred.StorageCPUSeconds / (4 * so.Pred.Seconds)
	return r
}

func TestShapes(t *testing.T) {
	for _, kind := range []string{"openimages-like", "imagenet-like"} {
		t.Run(kind, func(t *testing.T) {
			p := synthetic.Profile(kind, 20000, 1)
			plans := map[string]Plan{}
			for _, pl := range all1(p, ample) {
				plans[pl.Policy] = pl
			}
			bound := bound1(p, ample)
			t.Logf("ample storage CPU:\n%s", predictions(all1(p, ample)))
			nooff, so, opt := plans[NameNoOff].Pred.Seconds, plans[NameSOPHON].Pred.Seconds, plans[NameOptimal].Pred.Seconds
			t.Logf("nooff/sophon %.3f, optimal/bound %.5f", nooff/so, opt/bound)

			lim := limited(plans[NameSOPHON])
			lplans := map[string]Plan{}
			for _, pl := range all1(p, lim) {
				lplans[pl.Policy] = pl
			}
			lbound := bound1(p, lim)
			t.Logf("storage limited to %.3f cores:\n%s", lim.StorageCores, predictions(all1(p, lim)))
			lopt := lplans[NameOptimal].Pred.Seconds
			t.Logf("optimal/bound %.5f", lopt/lbound)

			if kind != "openimages-like" {
				return // the issue sets targets for OpenImages only
			}
			if so > nooff/2.2 {
				t.Errorf("ample: sophon %v > nooff/2.2 = %v", so, nooff/2.2)
			}
			if opt > 1.02*bound {
				t.Errorf("ample: optimal %v > 1.02 * bound %v", opt, bound)
			}
			if lopt > 1.05*lbound {
				t.Errorf("limited: optimal %v > 1.05 * bound %v", lopt, lbound)
			}
			for _, name := range []string{NameResizeOff, NameAllOff} {
				if s := lplans[name].Pred.Seconds; lopt >= s {
					t.Errorf("limited: optimal %v >= %s %v", lopt, name, s)
				}
			}
		})
	}
}

// predictions is one line per plan: its policy and predicted epoch (the
// policy explain tables are package explain's).
func predictions(plans []Plan) string {
	var b strings.Builder
	for _, pl := range plans {
		fmt.Fprintf(&b, "%s %+v\n", pl.Policy, pl.Pred)
	}
	return b.String()
}
