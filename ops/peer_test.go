package ops_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops"
)

// peerValScript runs torchvision's imagenet-val transforms on each JPEG
// given and writes the float32 tensor's raw bytes next to it.
const peerValScript = `
import sys, numpy as np, torchvision.transforms as T
from PIL import Image
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
for path in sys.argv[1:]:
    t = tf(Image.open(path).convert("RGB"))
    t.numpy().astype("<f4").tofile(path + ".f32")
`

// TestValMatchesTorchvision runs the deterministic imagenet-val preset here
// and in torchvision on the same JPEGs and compares the tensors. Decode
// (the same libjpeg-turbo) and resampling (a port of Pillow's) are exact,
// so the tensors agree to the last float32 bit unless torch's arithmetic
// differs.
func TestValMatchesTorchvision(t *testing.T) {
	if ops.JPEGBackend != "libjpeg-turbo" {
		t.Skip("the pure-Go decoder is not byte-identical to libjpeg-turbo")
	}
	testutil.RequirePython(t, "python3-torchvision python3-pil", "torchvision", "PIL")
	p, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sizes := [][2]int{{500, 375}, {375, 500}, {333, 251}, {1024, 683}, {200, 150}}
	var paths []string
	raws := map[string][]byte{}
	for i, s := range sizes {
		img := gradient(s[0], s[1])
		// Add texture so the resampler's rounding is exercised.
		for j := range img.Pix {
			img.Pix[j] += uint8((j * 2654435761 >> 13) & 31)
		}
		raw, err := ops.EncodeJPEG(img, ops.EncodeOptions{Quality: 90, Gray: i == 2})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.jpg", i))
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
		raws[path] = raw
	}
	script := filepath.Join(dir, "peer.py")
	if err := os.WriteFile(script, []byte(peerValScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/python3", append([]string{script}, paths...)...).CombinedOutput(); err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	for _, path := range paths {
		v, err := p.Run(ops.Key{}, ops.Encoded(raws[path]), 0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		ours := v.(*ops.Tensor)
		b, err := os.ReadFile(path + ".f32")
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 4*len(ours.Data) {
			t.Fatalf("%s: peer tensor has %d bytes, ours %d floats", path, len(b), len(ours.Data))
		}
		maxDiff, exact := 0.0, 0
		for i, f := range ours.Data {
			g := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			if f == g {
				exact++
			}
			maxDiff = math.Max(maxDiff, math.Abs(float64(f-g)))
		}
		t.Logf("%s: %d of %d values bit-identical to torchvision, max |diff| %.3g", filepath.Base(path), exact, len(ours.Data), maxDiff)
		// One uint8 step after normalisation is 1/255/0.225 ~ 0.0174.
		if maxDiff > 1e-5 {
			t.Errorf("%s: max |diff| %.3g from torchvision's tensor", path, maxDiff)
		}
	}
}
