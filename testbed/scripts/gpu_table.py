#!/usr/bin/env python3
"""Tabulates a gpu-q95.sh run: for each data set, precision and pipeline, the
trainer's images/s (whole run and its last epoch) beside the same model's rate
fed from memory (train_cnn.py --from-memory) and the DataLoader peer's, the
GPU utilisation by NVML and nvidia-smi in the last epoch, and the mean bytes
and compute-agent CPU per sample. Markdown on stdout; the rows as JSON with
--json FILE."""

import argparse
import json
import os


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def memory_rate(path):
    """The summary line of train_cnn.py --from-memory in ``path``."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("{") and '"from_memory": true' in line:
                    return json.loads(line)["images_per_s"]
    except OSError:
        pass
    return None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="gpu-q95.sh's OUT folder")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    rows = []
    for name in sorted(os.listdir(a.out)):
        s = load(os.path.join(a.out, name, "gpu-summary.json"))
        if s is None or name.count("-") < 3:
            continue
        kind, rest = name.split("-like-", 1) if "-like-" in name else (name, "")
        precision, pipeline = rest.split("-", 1)
        client, peer = s["rows"].get("sophon-client") or {}, s["rows"].get("peer-torchvision") or {}
        last = s["trainer_epochs"][-1] if s["trainer_epochs"] else {}
        memory = memory_rate(os.path.join(a.out, f"memory-{precision}.json"))
        steady = last.get("images_per_s")
        rows.append({"data": kind + "-like", "precision": precision, "pipeline": pipeline,
                     "client_images_per_s": client.get("loop_images_per_sec"),
                     "last_epoch_images_per_s": steady, "from_memory_images_per_s": memory,
                     "last_epoch_of_memory": steady / memory if steady and memory else None,
                     "peer_images_per_s": peer.get("loop_images_per_sec"),
                     "nvml_util_pct": last.get("nvml_util_pct"), "smi_util_pct": last.get("smi_util_pct"),
                     "gpu_idle_fraction": last.get("gpu_idle_fraction"),
                     "bytes_per_sample": last.get("bytes_per_sample"),
                     "compute_cpu_ms_per_sample": last.get("compute_cpu_ms_per_sample"),
                     "storage_cpu_ms_per_sample": last.get("storage_cpu_ms_per_sample"),
                     "exactly_once": client.get("exactly_once"), "error": client.get("error")})
    print("| data | precision | pipeline | client img/s (run) | last epoch img/s | from memory | "
          "last/memory | DataLoader img/s | NVML % | smi % | GPU idle | KB/sample | compute CPU ms/sample | "
          "storage CPU ms/sample | exactly once |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        kb = r["bytes_per_sample"] / 1e3 if r["bytes_per_sample"] is not None else None
        print(f"| {r['data']} | {r['precision']} | {r['pipeline']} | {fmt(r['client_images_per_s'], '.0f')} | "
              f"{fmt(r['last_epoch_images_per_s'], '.0f')} | {fmt(r['from_memory_images_per_s'], '.0f')} | "
              f"{fmt(r['last_epoch_of_memory'], '.2f')} | {fmt(r['peer_images_per_s'], '.0f')} | "
              f"{fmt(r['nvml_util_pct'], '.0f')} | {fmt(r['smi_util_pct'], '.0f')} | "
              f"{fmt(r['gpu_idle_fraction'], '.2f')} | {fmt(kb, '.1f')} | "
              f"{fmt(r['compute_cpu_ms_per_sample'], '.2f')} | {fmt(r['storage_cpu_ms_per_sample'], '.2f')} | "
              f"{r['exactly_once'] if r['error'] is None else r['error']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
