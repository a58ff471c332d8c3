#!/usr/bin/env python3
"""The Python end of the hand-off benchmark: how fast batches cross from the
compute agent into the trainer process.

It consumes ``--batches`` batches of whatever the agent serves through
``Loader.raw_batches()``, the iterator the Loader's tensors come from, so it
measures the real client (frames, slot checks, progress, RELEASE):

- ``--mode nocopy``: takes each batch's views of the ring and releases the
  slot when asking for the next one; it reads no image byte, so it measures
  the protocol and the agent's filling rate alone.
- ``--mode copy``: copies each batch's images, exactly once, into a
  preallocated torch tensor (``dst.copy_(torch.from_numpy(view))``, no
  normalisation), the least a trainer that keeps the batch has to do.

The clock starts when the first batch arrives, so connecting and the start of
the epoch are left out: ``bytes``, ``seconds`` and ``gb_per_s`` cover the
``timed_batches`` after the first. Epochs follow one another until enough
batches came. Prints one JSON line: {"mode", "batches", "timed_batches",
"bytes" (image bytes), "seconds", "gb_per_s"}.

    PYTHONPATH=python python3 python/bench/handoff_consumer.py --socket /tmp/sophon.sock \\
        --batches 500 --mode copy
"""

import argparse
import json
import os
import sys
import time

# An installed sophon (pip install ./python) or PYTHONPATH=python comes first;
# otherwise the copy next to this script.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import torch  # noqa: E402

import sophon  # noqa: E402


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="the agent's trainer socket "
                        "(default: $SOPHON_SOCKET or /tmp/sophon.sock)")
    parser.add_argument("--batches", type=int, default=200,
                        help="batches to consume, at least 2 (the first starts the clock)")
    parser.add_argument("--mode", choices=["nocopy", "copy"], default="nocopy")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.batches < 2:
        parser.error("--batches must be at least 2")
    return args


def endless(loader):
    """Batches of one epoch after another."""
    while True:
        yield from loader.raw_batches()


def toucher(loader, mode):
    """What each batch gets: nothing, or one copy of its images into a
    tensor allocated once."""
    if mode == "nocopy":
        return lambda batch: None
    info = loader.info
    dtype = {"uint8": torch.uint8, "float32": torch.float32}[info.dtype]
    destination = torch.empty((info.batch_size,) + info.row_shape, dtype=dtype)
    return lambda batch: destination[:batch.rows].copy_(torch.from_numpy(batch.images))


def consume(loader, batches, mode):
    """Takes one batch, starts the clock and takes ``batches - 1`` more;
    returns their image bytes and the seconds they took."""
    touch = toucher(loader, mode)
    stream = endless(loader)
    try:
        touch(next(stream))
        started, total = time.perf_counter(), 0
        for _ in range(batches - 1):
            batch = next(stream)
            touch(batch)
            total += batch.images.nbytes
        return total, time.perf_counter() - started
    finally:
        stream.close()


def main(argv=None):
    args = parse_args(argv)
    with sophon.Loader(socket=args.socket, timeout=args.timeout) as loader:
        total, seconds = consume(loader, args.batches, args.mode)
    print(json.dumps({"mode": args.mode, "batches": args.batches,
                      "timed_batches": args.batches - 1, "bytes": total,
                      "seconds": seconds, "gb_per_s": total / seconds / 1e9}))


if __name__ == "__main__":
    main()
