#!/usr/bin/env python3
"""PSNR of a JPEG round trip against how dense the crops are, per set.

Reads the per-crop CSV of `testbed fidelity --crops FILE` and prints, per
pipeline, the mean PSNR of the crops of each group of sets within bands of
the crop JPEG's bits per pixel (its bytes x 8 over the crop's 224 x 224
pixels: how much detail the encoder had to keep), then each set's mean
density. At one quality, crops of equal density lose about the same,
whatever set they come from; a set's mean PSNR follows its density.

    testbed fidelity --data photos,gen --crops crops.csv ...
    /usr/bin/python3 testbed/scripts/psnr_by_density.py crops.csv \\
        --group generated=openimages-like,imagenet-like

Sets not named in a --group form the group "other".
"""

import argparse
import csv
import sys

BANDS = [0, 2, 3, 4, 5, 6, 7, float("inf")]
PIXELS = 224 * 224


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("crops", help="CSV written by testbed fidelity --crops")
    ap.add_argument("--group", action="append", default=[],
                    help="NAME=SET,SET,...: sets pooled into one column (repeatable)")
    ap.add_argument("--pixels", type=int, default=PIXELS, help="pixels per crop")
    a = ap.parse_args(argv)

    group_of = {}
    names = []
    for g in a.group:
        name, _, sets = g.partition("=")
        if not name or not sets:
            ap.error(f"--group {g!r}: want NAME=SET,SET")
        names.append(name)
        for s in sets.split(","):
            group_of[s] = name
    names.append("other")

    with open(a.crops, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{a.crops}: no crops")
    pipelines = list(dict.fromkeys(r["pipeline"] for r in rows))
    sets = list(dict.fromkeys(r["set"] for r in rows))
    used = [n for n in names if any(group_of.get(r["set"], "other") == n for r in rows)]

    for p in pipelines:
        mine = [r for r in rows if r["pipeline"] == p]
        print(f"{p}: mean PSNR (dB) and crops, by the crop JPEG's bits per pixel")
        print("| bits/px | " + " | ".join(f"{n} dB | {n} crops" for n in used) + " |")
        print("|---|" + "---:|---:|" * len(used))
        for lo, hi in zip(BANDS, BANDS[1:]):
            cells = []
            for n in used:
                v = [float(r["psnr_db"]) for r in mine
                     if group_of.get(r["set"], "other") == n
                     and lo <= int(r["jpeg_bytes"]) * 8 / a.pixels < hi]
                cells.append(f"{sum(v) / len(v):.2f} | {len(v)}" if v else "- | 0")
            band = f"{lo}-{hi}" if hi != float("inf") else f">= {lo}"
            print(f"| {band} | " + " | ".join(cells) + " |")
        print()
        print("| set | crops | mean bits/px | mean dB |")
        print("|---|---:|---:|---:|")
        for s in sets:
            v = [r for r in mine if r["set"] == s]
            if not v:
                continue
            bpp = sum(int(r["jpeg_bytes"]) for r in v) * 8 / a.pixels / len(v)
            db = sum(float(r["psnr_db"]) for r in v) / len(v)
            print(f"| {s} | {len(v)} | {bpp:.2f} | {db:.2f} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
