#!/usr/bin/env python3
"""Summarises a gpu-check.sh run as one JSON object: the trainer row's and the
peer's images/s reaching the training loop, the trainer's wait per batch, and
per epoch the compute agent's NVML utilisation beside nvidia-smi's mean over
the same wall-clock window (each epoch report's start_unix_ns..end_unix_ns)."""

import argparse
import json
import os


def smi_mean(samples, start, end):
    xs = [u for t, u in samples if start <= t <= end]
    return (sum(xs) / len(xs), len(xs)) if xs else (None, 0)


def per(total, samples, scale=1):
    return total * scale / samples if total is not None and samples else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True, help="the testbed's results.json")
    p.add_argument("--report", required=True, help="the trainer row's agent report (sophon-client.jsonl)")
    p.add_argument("--smi", help="gpu-check.sh's smi.log: '<unix ns> <util %>' per line")
    a = p.parse_args()
    with open(a.results) as f:
        results = json.load(f)
    rows = {}
    for cell in results.get("cells", [results]):
        for r in cell.get("runs", []):
            if r.get("training"):
                name = r["policy"] + (f" [{r['pipeline']}]" if r.get("pipeline") else "")
                rows[name] = {k: r.get(k) for k in ("plan", "loop_images", "loop_seconds",
                                                           "loop_images_per_sec", "loop_wait_seconds",
                                                           "exactly_once", "content_matches", "error")}
    samples = []
    if a.smi and os.path.exists(a.smi):
        with open(a.smi) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    samples.append((int(parts[0]), float(parts[1])))
    epochs = []
    with open(a.report) as f:
        for line in f:
            e = json.loads(line)
            mean, n = smi_mean(samples, e["start_unix_ns"], e["end_unix_ns"])
            trainers = e.get("trainers") or []
            batches = sum(t["batches"] for t in trainers)
            wait = sum(t["wait_seconds"] for t in trainers)
            epochs.append({"epoch": e["epoch"], "plan": e.get("plan"), "seconds": e["seconds"],
                           "samples": e["samples"], "images_per_s": e["samples"] / e["seconds"] if e["seconds"] else None,
                           "nvml_status": e["gpu"]["status"], "nvml_util_pct": e["gpu"]["mean_util_pct"],
                           "nvml_readings": e["gpu"]["samples"], "smi_util_pct": mean, "smi_readings": n,
                           "wait_per_batch_s": wait / batches if batches else None,
                           "gpu_idle_fraction": e.get("gpu_idle_fraction"),
                           "start_wait_s": e.get("start_wait_seconds"),
                           "bytes_per_sample": per(e.get("bytes_received"), e["samples"]),
                           "compute_cpu_ms_per_sample": per(e.get("compute_cpu_seconds"), e["samples"], 1e3),
                           "storage_cpu_ms_per_sample": per(e.get("storage_cpu_seconds"), e["samples"], 1e3)})
    out = {"rows": rows, "trainer_epochs": epochs}
    client, peer = rows.get("sophon-client"), rows.get("peer-torchvision")
    if client and peer and client.get("loop_images_per_sec") and peer.get("loop_images_per_sec"):
        out["client_over_peer"] = client["loop_images_per_sec"] / peer["loop_images_per_sec"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
