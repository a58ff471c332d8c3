#!/usr/bin/env python3
"""Make an ImageFolder set of distinct photographs from a few large ones.

Debian ships a few dozen real photographs in wallpaper packages (each a
few megapixels), far fewer than a testbed cell wants. This cuts N distinct
views out of them: for image i, a master (i % len(masters)), a crop of a
random position whose side is a random fraction of the master's (never
smaller than what the target size needs, so nothing is upscaled unless the
master itself is smaller), an optional mirror, a resize to --long pixels on
the long side (Lanczos), and a baseline JPEG at a quality drawn from
[--qmin, --qmax] with 4:2:0 chroma, as cameras and photo sites write them.
Images go to OUT/class_000 .. class_{C-1} (i % C). Everything is a
function of --seed and the masters' sorted paths.

    /usr/bin/python3 testbed/scripts/photo_set.py --out OUT --n 150 --long 1024 \\
        --seed 5 MASTER.jpg [MASTER.jpg ...]
"""

import argparse
import os
import random
import sys

from PIL import Image


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--n", type=int, default=150, help="images to write")
    ap.add_argument("--long", type=int, default=1024, help="long side of each image, px")
    ap.add_argument("--classes", type=int, default=2, help="class folders")
    ap.add_argument("--qmin", type=int, default=85, help="least JPEG quality")
    ap.add_argument("--qmax", type=int, default=95, help="greatest JPEG quality")
    ap.add_argument("--seed", type=int, default=1, help="seed of every draw")
    ap.add_argument("masters", nargs="+", help="source photographs")
    a = ap.parse_args(argv)
    if a.n < 1 or a.long < 16 or a.classes < 1 or not 1 <= a.qmin <= a.qmax <= 100:
        ap.error("need --n >= 1, --long >= 16, --classes >= 1 and 1 <= --qmin <= --qmax <= 100")
    masters = sorted(set(a.masters))
    rng = random.Random(a.seed)
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "class_%03d" % c), exist_ok=True)
    total = 0
    for i in range(a.n):
        with Image.open(masters[i % len(masters)]) as im:
            im = im.convert("RGB")
            w, h = im.size
            # The crop's side as a fraction of the master's: at least what
            # keeps --long pixels on the long side, and at least 0.35.
            lo = min(1.0, max(0.35, a.long / max(w, h)))
            f = rng.uniform(lo, 1.0)
            cw, ch = max(1, round(w * f)), max(1, round(h * f))
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            crop = im.crop((x, y, x + cw, y + ch))
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            s = a.long / max(cw, ch)
            crop = crop.resize((max(1, round(cw * s)), max(1, round(ch * s))), Image.Resampling.LANCZOS)
            q = rng.randint(a.qmin, a.qmax)
            path = os.path.join(a.out, "class_%03d" % (i % a.classes), "photo_%05d.jpg" % i)
            crop.save(path, "JPEG", quality=q, subsampling="4:2:0")
            total += os.path.getsize(path)
    print("%d images, %.1f KB on average, in %s" % (a.n, total / a.n / 1024, a.out))


if __name__ == "__main__":
    main(sys.argv[1:])
