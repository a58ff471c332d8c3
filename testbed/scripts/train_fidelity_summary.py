#!/usr/bin/env python3
"""Summarise a train-fidelity.sh folder: per pipeline, each seed's final
held-out accuracy (after the last epoch), their mean, min and max, and for
each pipeline after the first (the reference, lossless) its paired
differences (same seed: same order, crops and initial weights) and where
its mean lies against the reference's [min, max]: within, above or below.
Writes OUT/results.json; exits 1 when a mean lies below the reference's min
(the compressed pipeline hurt accuracy beyond the seeds' spread).

    /usr/bin/python3 testbed/scripts/train_fidelity_summary.py OUT imagenet-train imagenet-train-q95 ...
"""

import json
import os
import sys


def main(out, pipelines):
    results = {}
    for p in pipelines:
        runs = {}
        for seed_dir in sorted(os.listdir(os.path.join(out, "runs", p))):
            with open(os.path.join(out, "runs", p, seed_dir, "trainer.jsonl")) as f:
                lines = [json.loads(line) for line in f]
            evals = [line for line in lines if line.get("eval")]
            runs[seed_dir] = {"accuracy": [e["accuracy"] for e in evals],
                              "train_accuracy": [e["train_accuracy"] for e in evals]}
        final = [r["accuracy"][-1] for r in runs.values()]
        results[p] = {"runs": runs, "final": final, "mean": sum(final) / len(final),
                      "min": min(final), "max": max(final)}
    ref = results[pipelines[0]]
    print(f"\nfinal held-out accuracy after the last epoch, per seed ({', '.join(ref['runs'])}):")
    failed = False
    for p in pipelines:
        r = results[p]
        line = (f"  {p:20s} {' '.join(f'{a:.3f}' for a in r['final'])}  mean {r['mean']:.3f}"
                f"  min {r['min']:.3f}  max {r['max']:.3f}")
        if p != pipelines[0]:
            where = ("below" if r["mean"] < ref["min"] else
                     "above" if r["mean"] > ref["max"] else "within")
            paired = [a - b for a, b in zip(r["final"], ref["final"])]
            r["against_reference_spread"] = where
            r["paired_difference"] = paired
            line += (f"  paired vs {pipelines[0]}: {' '.join(f'{d:+.3f}' for d in paired)}"
                     f"  mean {where} [{ref['min']:.3f}, {ref['max']:.3f}]")
            failed |= where == "below"
        print(line)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nresults: {os.path.join(out, 'results.json')}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
