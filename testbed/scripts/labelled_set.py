#!/usr/bin/env python3
"""Turn a folder of generated photo-like JPEGs into a labelled ImageFolder
set whose class is visible in the pixels, with a held-out split.

testbed gen's class folders are labels only (sample i in class i % C, the
pixels independent of it), so a model can learn nothing from them. Here each
image gets a faint sinusoidal pattern over its photo-like content, one kind
per class, kept under RandomResizedCrop and RandomHorizontalFlip:

    class_000  stripes across x (vertical bars)
    class_001  stripes across y (horizontal bars)
    class_002  a checkerboard (the product of both)
    class_003  no pattern

with a period (--period, px) and an amplitude (--amplitude, grey levels)
drawn uniformly per image, so that the task is learnable but not trivial, and the pattern is
the kind of mid-frequency detail a JPEG round trip could blur. Images i
with (i // C) < --train-per-class go to OUT/train, the rest to OUT/val.
Everything is a function of --seed and the input files' sorted order;
the output is baseline JPEG at --quality (PIL, 4:2:0).

    /usr/bin/python3 testbed/scripts/labelled_set.py --src DIR --out OUT \\
        --classes 4 --train-per-class 100 --seed 11
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image

PATTERNS = ("stripes-x", "stripes-y", "checker", "none")


def pattern(kind, w, h, period, phase):
    """The class's pattern, in [-1, 1], as an h x w float array."""
    x = np.arange(w, dtype=np.float64)[None, :]
    y = np.arange(h, dtype=np.float64)[:, None]
    sx = np.sin(2 * np.pi * x / period + phase)
    sy = np.sin(2 * np.pi * y / period + phase)
    if kind == "stripes-x":
        return np.broadcast_to(sx, (h, w))
    if kind == "stripes-y":
        return np.broadcast_to(sy, (h, w))
    if kind == "checker":
        return sx * sy
    return np.zeros((h, w))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="folder of JPEGs (searched recursively)")
    parser.add_argument("--out", required=True, help="output folder: OUT/train and OUT/val")
    parser.add_argument("--classes", type=int, default=4, help="classes, at most 4")
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--period", default="28,56", help="MIN,MAX period in pixels")
    parser.add_argument("--amplitude", default="30,60", help="MIN,MAX amplitude in grey levels")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of the output")
    args = parser.parse_args(argv)
    if not 2 <= args.classes <= len(PATTERNS):
        sys.exit(f"--classes {args.classes}: between 2 and {len(PATTERNS)}")
    period_range = [float(v) for v in args.period.split(",")]
    amplitude_range = [float(v) for v in args.amplitude.split(",")]
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.src) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg")))
    if not files:
        sys.exit(f"no JPEGs under {args.src}")
    counts = {"train": 0, "val": 0}
    for i, path in enumerate(files):
        c = i % args.classes
        split = "train" if i // args.classes < args.train_per_class else "val"
        rng = np.random.default_rng([args.seed, i])
        period, phase, amplitude = (rng.uniform(*period_range), rng.uniform(0, 2 * np.pi),
                                     rng.uniform(*amplitude_range))
        with Image.open(path) as im:
            pixels = np.asarray(im.convert("RGB"), dtype=np.float64)
        h, w, _ = pixels.shape
        pixels += amplitude * pattern(PATTERNS[c], w, h, period, phase)[:, :, None]
        out = os.path.join(args.out, split, f"class_{c:03d}")
        os.makedirs(out, exist_ok=True)
        Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8)).save(
            os.path.join(out, f"n{i:08d}.jpg"), quality=args.quality, subsampling=2)
        counts[split] += 1
    print(f"labelled set: {counts['train']} train, {counts['val']} held-out images in "
          f"{args.classes} classes ({', '.join(PATTERNS[:args.classes])}) under {args.out}")


if __name__ == "__main__":
    main()
