#!/usr/bin/python3
"""The peer row: what a user gets without our system. A stock PyTorch
DataLoader with torchvision's transforms reads the raw JPEGs over HTTP from
`testbed serve` (package testbed/fileserve), through the same link as the
agents, and feeds a simulated GPU that consumes as the compute agent's
sim:RATE does: it sleeps len(batch)/RATE seconds per batch.

Usage:
  dataloader_peer.py --url http://HOST:PORT [--preset NAME] [--epochs N]
      [--batch B] [--workers W] [--gpu-rate R] [--seed S] [--report FILE]
      [--progress] [--train-model TRAIN_CNN_PY --num-classes C [--lr LR]]

With --train-model the training loop trains the small CNN of that file
(python/examples/train_cnn.py: its SmallCNN and its default --lr, imported
by path) instead of feeding the simulated GPU, set up as train_cnn.py sets
it up: torch.manual_seed(0) before the model is built, one thread,
deterministic algorithms, SGD with momentum 0.9, cross-entropy on the
ImageFolder labels (the sorted top-level folders of the files' paths, as
the storage agent labels them). --gpu-rate is then ignored.

The report gets one JSON line per epoch, appended (as the compute agent's
report is):
  epoch             int    epoch number, from 1
  seconds           float  wall time from the epoch's first request to its last batch consumed
  start_unix_ns     int    when the epoch began and ended (Unix ns), to match it with
  end_unix_ns       int    outside counters (the testbed's veth bytes)
  samples           int    samples delivered to the simulated GPU
  batches           int    batches delivered (a batch whose samples all failed is not delivered)
  bytes             int    file bytes received, failed samples included
  unique_samples    int    distinct ids among the delivered samples
  duplicates        int    delivered samples whose id had already been delivered this epoch
  failed            int    samples whose JPEG did not decode (they are dropped from their batch)
  gpu_idle_seconds  float  time the training loop waited for the DataLoader
  pipeline, batch, workers, gpu_rate: the run's settings
  trained           bool   true with --train-model: each batch was a training step
  losses            [float] with --train-model: the losses of the epoch's first --first-losses steps

Exit status: 0 done; 1 an error (the message says which); 2 bad arguments;
3 torch or torchvision is missing (the peer is skipped).
"""
import argparse
import http.client
import importlib.util
import io
import json
import os
import signal
import sys
import time
import urllib.parse
import urllib.request

try:
    import torch
    import torch.utils.data
    import torchvision.transforms as T
    from PIL import Image
except ImportError as e:
    print("peer skipped: torchvision missing (apt-get install python3-torchvision)", file=sys.stderr)
    print(f"  ({type(e).__name__}: {e}; python {sys.executable})", file=sys.stderr)
    sys.exit(3)

# NB: the same pipelines as torchvision_bench.py; keep the two in step.
# RandomResizedCrop's defaults are scale (0.08, 1), ratio (3/4, 4/3),
# bilinear.
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PRESETS = {
    "imagenet-train": lambda: T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(MEAN, STD),
    ]),
    "imagenet-val": lambda: T.Compose([
        T.Resize(256),
        T.CenterCrop(224),
        T.ToTensor(),
        T.Normalize(MEAN, STD),
    ]),
}
# The peer has no fused fast path: the fast preset's peer is the plain one.
PRESETS["imagenet-train-fast"] = PRESETS["imagenet-train"]

# Seconds one file request may take before the peer gives up.
FETCH_TIMEOUT = 120

MAIN_PID = os.getpid()


class FetchError(Exception):
    """A file could not be fetched: fatal, unlike a JPEG that fails to decode."""


class HTTPFiles(torch.utils.data.Dataset):
    """The files of a `testbed serve` index, fetched by id. Each process
    (every DataLoader worker) keeps one keep-alive connection.

    __getitem__ returns (tensor, id, nbytes, error): error is None, or the
    reason the JPEG failed to decode, with tensor None.
    """

    def __init__(self, url, ids, transform):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"--url {url!r}: want http://HOST:PORT")
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.ids = ids
        self.transform = transform
        self._conn, self._pid = None, None

    def __getstate__(self):
        # A socket does not cross a spawn; each worker dials its own.
        state = self.__dict__.copy()
        state["_conn"], state["_pid"] = None, None
        return state

    def __len__(self):
        return len(self.ids)

    def _connection(self):
        # NB: a connection inherited through fork is the parent's socket:
        # never share it.
        if self._conn is None or self._pid != os.getpid():
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=FETCH_TIMEOUT)
            self._pid = os.getpid()
        return self._conn

    def fetch(self, fid):
        path = f"{self.prefix}/files/{fid}"
        # One retry on a fresh connection covers a keep-alive connection
        # that the server closed while it was idle.
        for attempt in range(2):
            conn = self._connection()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                self._conn = None
                if attempt == 0:
                    continue
                raise FetchError(f"GET http://{self.host}:{self.port}{path}: {type(e).__name__}: {e}") from None
            if resp.status != 200:
                raise FetchError(f"GET http://{self.host}:{self.port}{path}: HTTP {resp.status}: {body[:200].decode(errors='replace').strip()}")
            return body

    def __getitem__(self, idx):
        fid = self.ids[idx]
        raw = self.fetch(fid)
        try:
            # torchvision's default_loader: Image.open(f).convert("RGB").
            img = Image.open(io.BytesIO(raw)).convert("RGB")
            return self.transform(img), fid, len(raw), None
        except Exception as e:  # UnidentifiedImageError, OSError (truncated), ...
            return None, fid, len(raw), f"{type(e).__name__}: {e}"


def collate(items):
    """Stacks the decoded samples; failed ones leave the batch (the compute
    agent drops failed samples too). Returns (tensor or None, ids, bytes,
    [(id, error)])."""
    good = [it for it in items if it[3] is None]
    x = torch.stack([it[0] for it in good]) if good else None
    return x, [it[1] for it in good], sum(it[2] for it in items), [(it[1], it[3]) for it in items if it[3] is not None]


class EpochShuffle(torch.utils.data.Sampler):
    """A fresh permutation per epoch from (seed, epoch), as
    DistributedSampler draws it: set .epoch before iterating."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch = n, seed, 1

    def __len__(self):
        return self.n

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed((self.seed + self.epoch) % 2**64)
        return iter(torch.randperm(self.n, generator=g).tolist())


def read_index(url):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/index.json", timeout=FETCH_TIMEOUT) as r:
            files = json.load(r)["files"]
    except Exception as e:
        raise FetchError(f"reading the index {url.rstrip('/')}/index.json: {type(e).__name__}: {e}") from None
    if not files:
        raise FetchError(f"{url}: the index lists no files")
    return files


def load_trainer(path):
    """Imports train_cnn.py by path (it puts the repository's python/ on
    sys.path for the client it imports), for its SmallCNN and defaults."""
    spec = importlib.util.spec_from_file_location("sophon_train_cnn", path)
    if spec is None:
        raise ValueError(f"--train-model {path!r}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Trainer:
    """The training step of train_cnn.py, on the DataLoader's batches."""

    def __init__(self, path, num_classes, lr, labels):
        mod = load_trainer(path)
        if lr is None:
            lr = mod.parse_args(["--num-classes", str(num_classes)]).lr
        # As train_cnn.py's main: the same seed gives the same initial weights,
        # the same model ($SOPHON_TRAIN_MODEL) on the same device
        # ($SOPHON_TRAIN_DEVICE).
        defaults = mod.parse_args(["--num-classes", str(num_classes)])
        self.device = mod.setup(0, defaults.device)
        self.model = mod.build_model(defaults.model, num_classes).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.labels, self.num_classes, self.lr = labels, num_classes, lr
        self.train_step, self.amp = mod.train_step, defaults.amp  # $SOPHON_TRAIN_AMP

    def step(self, x, ids):
        labels = torch.tensor([self.labels[i] for i in ids], dtype=torch.int64).to(self.device)
        x = x.to(self.device, non_blocking=True)
        if int(labels.max()) >= self.num_classes:
            raise ValueError(f"label {int(labels.max())} is not below --num-classes {self.num_classes}")
        _, loss = self.train_step(self.model, self.optimizer, self.loss_fn, x, labels, self.amp)
        return loss.item()


def folder_labels(files):
    """Each file id's ImageFolder label: the index of its path's top-level
    folder among the sorted folders (0 for files at the top)."""
    top = [f["path"].split("/", 1)[0] if "/" in f["path"] else "" for f in files]
    classes = sorted(set(t for t in top if t))
    index = {c: i for i, c in enumerate(classes)}
    return {f["id"]: index.get(t, 0) for f, t in zip(files, top)}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="The peer row: a stock PyTorch DataLoader with torchvision transforms over HTTP.",
        epilog="example: dataloader_peer.py --url http://10.77.0.1:8080 --preset imagenet-train --epochs 2 --gpu-rate 1150 --report peer.jsonl")
    p.add_argument("--url", required=True, help="the file server, http://HOST:PORT (testbed serve)")
    p.add_argument("--preset", default="imagenet-train", choices=sorted(PRESETS), help="torchvision pipeline (default imagenet-train)")
    p.add_argument("--epochs", type=int, default=1, help="epochs to run (default 1)")
    # The compute agent's default batch (computeagent.DefaultBatch).
    p.add_argument("--batch", type=int, default=128, help="samples per batch (default 128, the compute agent's)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader num_workers; 0 loads in the main process (default: the CPU count)")
    p.add_argument("--gpu-rate", type=float, default=0, help="samples/s the simulated GPU consumes: it sleeps len(batch)/R per batch; 0 = unlimited")
    p.add_argument("--seed", type=int, default=1, help="shuffle and transform seed (default 1)")
    p.add_argument("--report", default="", help="append one JSON line per epoch to this file")
    p.add_argument("--progress", action="store_true", help="print a progress line to stderr every 2 s")
    p.add_argument("--train-model", default="", metavar="TRAIN_CNN_PY",
                   help="train the SmallCNN of this train_cnn.py on each batch instead of the simulated GPU")
    p.add_argument("--num-classes", type=int, default=1000, help="with --train-model: the classifier's outputs (default 1000)")
    p.add_argument("--lr", type=float, default=None, help="with --train-model: SGD's learning rate (default: train_cnn.py's)")
    p.add_argument("--first-losses", type=int, default=10, help="with --train-model: report the losses of each epoch's first N steps (default 10)")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch < 1 or a.workers < 0 or not a.gpu_rate >= 0 or a.seed < 0:
        p.error("--epochs and --batch must be positive, --workers, --gpu-rate and --seed not negative")
    if a.num_classes < 1 or a.first_losses < 0:
        p.error("--num-classes must be positive, --first-losses not negative")
    return a


def run_epoch(a, loader, sampler, n, epoch, trainer=None):
    sampler.epoch = epoch
    losses = []
    seen = set()
    samples = batches = dups = failed = 0
    nbytes = 0
    idle = 0.0
    t0 = time.perf_counter()
    start_ns = time.time_ns()
    end = t0
    last_progress = t0
    it = iter(loader)  # the workers get their first indices here
    while True:
        w0 = time.perf_counter()
        try:
            x, ids, nb, bad = next(it)
        except StopIteration:
            break
        idle += time.perf_counter() - w0
        nbytes += nb
        failed += len(bad)
        for fid, err in bad:
            print(f"peer: epoch {epoch}: file {fid} failed: {err}", file=sys.stderr)
        if ids:
            if trainer is not None:
                loss = trainer.step(x, ids)
                if len(losses) < a.first_losses:
                    losses.append(loss)
            # The simulated training step, as computeagent.Sim with
            # PerSample = 1/rate: it blocks for the batch's length.
            elif a.gpu_rate > 0:
                time.sleep(len(ids) / a.gpu_rate)
            for fid in ids:
                if fid in seen:
                    dups += 1
                else:
                    seen.add(fid)
            samples += len(ids)
            batches += 1
        end = time.perf_counter()
        if a.progress and end - last_progress >= 2:
            last_progress = end
            el = end - t0
            print(f"peer: epoch {epoch}: {samples + failed}/{n} samples, {el:.1f}s, {samples / el:.1f} img/s, "
                  f"{nbytes / el / 1e6:.2f} MB/s, gpu idle {idle / el:.0%}", file=sys.stderr, flush=True)
    if samples + failed != n:
        raise RuntimeError(f"epoch {epoch}: delivered {samples} and failed {failed} of {n} samples")
    r = {
        "epoch": epoch,
        "seconds": end - t0,
        "start_unix_ns": start_ns,
        "end_unix_ns": start_ns + int((end - t0) * 1e9),
        "samples": samples,
        "batches": batches,
        "bytes": nbytes,
        "unique_samples": len(seen),
        "duplicates": dups,
        "failed": failed,
        "gpu_idle_seconds": idle,
        "pipeline": f"torchvision-{a.preset}",
        "batch": a.batch,
        "workers": a.workers,
        "gpu_rate": a.gpu_rate,
    }
    if trainer is not None:
        r["trained"], r["losses"] = True, losses
    return r


def on_term(signum, frame):
    # SIGTERM (the Go side's cancel) unwinds the main process like ^C, so
    # the DataLoader shuts its workers down; a worker just leaves.
    if os.getpid() != MAIN_PID:
        os._exit(128 + signum)
    raise KeyboardInterrupt


def main(argv):
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    files = read_index(a.url)
    trainer = None
    if a.train_model:
        # Before the transforms' seed, as train_cnn.py builds its model
        # right after torch.manual_seed(0).
        trainer = Trainer(a.train_model, a.num_classes, a.lr, folder_labels(files))
    torch.manual_seed(a.seed % 2**64)
    ds = HTTPFiles(a.url, [f["id"] for f in files], PRESETS[a.preset]())
    sampler = EpochShuffle(len(ds), a.seed)
    g = torch.Generator()
    g.manual_seed(a.seed % 2**64)  # the workers' seeds derive from it
    loader = torch.utils.data.DataLoader(
        ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
        collate_fn=collate, generator=g, persistent_workers=a.workers > 0)
    print(f"peer: {len(ds)} files from {a.url}, pipeline torchvision-{a.preset}, batch {a.batch}, "
          f"{a.workers} workers, " + (f"training {a.train_model}'s SmallCNN ({a.num_classes} classes, lr {trainer.lr})"
                                      if trainer else f"gpu rate {a.gpu_rate or 'unlimited'}"), file=sys.stderr, flush=True)
    for epoch in range(1, a.epochs + 1):
        r = run_epoch(a, loader, sampler, len(ds), epoch, trainer)
        print(f"epoch {epoch}: {r['samples']} samples in {r['seconds']:.2f}s ({r['samples'] / max(r['seconds'], 1e-9):.1f} img/s), "
              f"{r['bytes'] / 1e6:.2f} MB, {r['failed']} failed, gpu idle {r['gpu_idle_seconds']:.2f}s"
              + (f", first losses {' '.join(f'{v:.4f}' for v in r['losses'])}" if trainer else ""), flush=True)
        if a.report:
            with open(a.report, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("peer: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        # DataLoader re-raises a worker's error with the worker's traceback
        # in its message: print it, then the error alone as the last line.
        msg = str(e).strip()
        if "\n" in msg:
            print(msg, file=sys.stderr)
            msg = msg.splitlines()[-1]
        print(f"peer: failed: {type(e).__name__}: {msg}" if not msg.startswith(type(e).__name__) else f"peer: failed: {msg}", file=sys.stderr)
        sys.exit(1)
