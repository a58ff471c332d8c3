#!/usr/bin/python3
"""The peer: torchvision's transforms on Pillow, one thread, over a folder of
JPEGs held in memory. Prints the same throughput line as `testbed ops`.

Usage: torchvision_bench.py DIR PRESET SECONDS
"""
import io
import os
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image

PRESETS = {
    "imagenet-train": lambda: T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]),
    "imagenet-val": lambda: T.Compose([
        T.Resize(256),
        T.CenterCrop(224),
        T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]),
}
# The peer has no fused fast path: the fast preset's peer is the plain one.
PRESETS["imagenet-train-fast"] = PRESETS["imagenet-train"]
# Decode only (the loader's Image.open(...).convert("RGB")), to show how much
# of the peer's time the decode alone takes.
PRESETS["decode-only"] = lambda: (lambda img: img)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    root, preset, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    tf = PRESETS[preset]()
    paths = sorted(
        os.path.join(d, f)
        for d, _, fs in os.walk(root)
        for f in fs
        if f.lower().endswith((".jpg", ".jpeg"))
    )
    if not paths:
        sys.exit(f"no JPEGs under {root}")
    samples = [open(p, "rb").read() for p in paths]
    # torchvision's default_loader: Image.open(f).convert("RGB").
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for raw in samples:
            img = Image.open(io.BytesIO(raw)).convert("RGB")
            tf(img)
            n += 1
    secs = time.perf_counter() - start
    print(f"throughput: pipeline=torchvision-{preset} images={n} seconds={secs:.2f} img_per_s={n / secs:.1f} (one thread)")


if __name__ == "__main__":
    main()
