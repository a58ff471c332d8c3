#!/usr/bin/env python3
"""Train a small CNN on batches from the compute agent, through sophon.Loader.

The one-line swap: where a training script built a DataLoader,

    # loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True,
    #                                      num_workers=8, drop_last=False)
    loader = sophon.Loader(socket=args.socket)

the rest of the loop stays as it was. The run is deterministic (seeded, one
thread, deterministic algorithms), so an interrupted run resumed from its
--state-out file prints the same losses, bit for bit, as an uninterrupted one.

Output: one JSON line per step, {"epoch", "step", "batch", "loss",
"loss_hex", "images"}, then a summary line with the images per second that
reached the loop and the time the loop waited for batches.

With --eval-every-epoch, each epoch ends with a line {"eval": true, "epoch",
"train_accuracy", "train_images"}: the top-1 accuracy of the epoch's own
batches, as the model saw them before each step. With --eval-socket, a second
agent serving a held-out split (typically with --pipeline imagenet-val) is
read once through after every epoch, with the model in eval mode and no
gradients, and the line adds its "accuracy", "loss" and "images"; the summary
line then carries the last epoch's "accuracy" (and "train_accuracy").

    PYTHONPATH=python python3 python/examples/train_cnn.py --socket /tmp/sophon.sock --epochs 2
    ... --eval-socket /tmp/sophon-val.sock     # accuracy on a held-out split after every epoch
"""

import argparse
import hashlib
import json
import os
import sys
import time

# An installed sophon (pip install ./python) or PYTHONPATH=python comes first;
# otherwise the copy next to this script.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import sophon  # noqa: E402


class SmallCNN(nn.Module):
    """Two convolutions and a linear layer; the input is pooled to 56x56 first
    so that a few CPU epochs of 224x224 images take seconds."""

    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.AdaptiveAvgPool2d(56),
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def build_model(name, num_classes):
    """The model to train: "small" (SmallCNN, the default, for CPU runs) or a
    torchvision classifier by name ("resnet18", "resnet50", ...)."""
    if name == "small":
        return SmallCNN(num_classes)
    import torchvision  # only for the torchvision models

    try:
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    except ValueError as e:
        raise SystemExit(f"--model {name!r}: not small nor a torchvision model ({e})") from None


def setup(seed, device):
    """Seeds and determinism as the runs compare them, for a CPU or a CUDA
    device; returns the torch.device. On CPU the run is bit-reproducible (one
    thread, deterministic algorithms); on CUDA it asks for deterministic
    kernels where torch has them and warns where it has none."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.use_deterministic_algorithms(True)
    return device


def train_step(model, optimizer, loss_fn, images, labels, amp=False):
    """One SGD step on a batch: (logits, loss). With ``amp`` the forward pass
    and the loss run under torch.autocast in bfloat16 (no gradient scaler:
    bfloat16 has float32's exponent range); the weights stay float32."""
    optimizer.zero_grad()
    with torch.autocast(device_type=images.device.type, dtype=torch.bfloat16, enabled=amp):
        logits = model(images)
        loss = loss_fn(logits, labels)
    loss.backward()
    optimizer.step()
    return logits, loss


def from_memory(args, model, optimizer, loss_fn, device):
    """The model's own rate: ``args.from_memory`` training steps on one random
    batch already in the device's memory (the same step and the same
    ``loss.item()`` per step as the loop over the loader, after 5 steps of
    warm-up), printed as a summary line with "from_memory": true. The rate a
    loader can at best feed."""
    g = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.batch, 3, 224, 224, generator=g).to(device)
    labels = torch.randint(0, args.num_classes, (args.batch,), generator=g).to(device)
    warm = 5
    for step in range(warm + args.from_memory):
        if step == warm:
            started = time.perf_counter()
        _, loss = train_step(model, optimizer, loss_fn, images, labels, args.amp)
        loss.item()
    seconds = time.perf_counter() - started
    images_seen = args.from_memory * args.batch
    print(json.dumps({"summary": True, "from_memory": True, "model": args.model, "amp": args.amp,
                      "device": str(device), "batch": args.batch, "steps": args.from_memory,
                      "images": images_seen, "seconds": round(seconds, 6),
                      "images_per_s": round(images_seen / seconds, 3)}), flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="the agent's trainer socket "
                        "(default: $SOPHON_SOCKET or /tmp/sophon.sock)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0,
                        help="torch's seed: the model's initial weights (the data's order and "
                        "augmentation come from the agent's --seed)")
    parser.add_argument("--num-classes", type=int, default=1000,
                        help="classifier outputs; every label must be below it")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--model", default=os.environ.get("SOPHON_TRAIN_MODEL", "small"),
                        help="small (the default: a small CNN for CPU runs) or a torchvision "
                        "model name such as resnet50 (default: $SOPHON_TRAIN_MODEL or small)")
    parser.add_argument("--device", default=os.environ.get("SOPHON_TRAIN_DEVICE", "cpu"),
                        help="where the model trains and the loader normalises: cpu or cuda "
                        "(default: $SOPHON_TRAIN_DEVICE or cpu)")
    parser.add_argument("--amp", action="store_true",
                        default=os.environ.get("SOPHON_TRAIN_AMP", "") not in ("", "0"),
                        help="mixed precision: the forward pass and the loss under torch.autocast "
                        "in bfloat16 (default: on when $SOPHON_TRAIN_AMP is set and not 0)")
    parser.add_argument("--from-memory", type=int, metavar="STEPS",
                        help="no loader: time STEPS training steps on one random batch of --batch "
                        "images held in the device's memory (the model's own rate) and exit")
    parser.add_argument("--batch", type=int, default=128,
                        help="with --from-memory: images per batch (default 128, the compute "
                        "agent's)")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps in all")
    parser.add_argument("--state-out", help="save the loader, model and optimizer state "
                        "to this file after every step (atomically)")
    parser.add_argument("--resume", help="start from a --state-out file")
    parser.add_argument("--kill-after-step", type=int, metavar="N",
                        help="exit with status 3 right after saving the state of step N "
                        "(a crash, for resume tests)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for a batch before giving up (sophon.AgentTimeout)")
    parser.add_argument("--dump-batches", metavar="FILE", help="append a JSON line per batch: "
                        "epoch, batch index and the sha256 of the images' and labels' bytes")
    parser.add_argument("--eval-every-epoch", action="store_true",
                        help="after each epoch print a JSON line with the top-1 accuracy over "
                        "the epoch's own batches (train_accuracy), and over the held-out split "
                        "when --eval-socket is given")
    parser.add_argument("--eval-socket", metavar="SOCKET",
                        help="a second agent's trainer socket serving a held-out split: read "
                        "once through after every epoch, without gradients (implies "
                        "--eval-every-epoch)")
    args = parser.parse_args(argv)
    if args.from_memory is not None and (args.from_memory < 1 or args.batch < 1):
        parser.error("--from-memory and --batch must be positive")
    if args.eval_socket:
        args.eval_every_epoch = True
    return args


def evaluate(model, loader, loss_fn, device, num_classes):
    """One pass over ``loader`` (the next epoch of the held-out agent) in eval
    mode without gradients: (top-1 accuracy, mean loss, images)."""
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for images, labels in loader:
            if len(labels) == 0:
                continue
            if int(labels.max()) >= num_classes:
                sys.exit(f"held-out label {int(labels.max())} is not below --num-classes "
                         f"{num_classes}")
            labels = labels.to(device, non_blocking=True)
            logits = model(images)
            loss_sum += float(loss_fn(logits, labels).item()) * len(labels)
            correct += int((logits.argmax(1) == labels).sum().item())
            total += len(labels)
    model.train()
    if total == 0:
        return None, None, 0
    return correct / total, loss_sum / total, total


def save_state(path, model, optimizer, loader, step):
    """Writes the training state to ``path`` so that a crash leaves the old or the new."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "loader": loader.state_dict(), "step": step}
    temporary = path + ".tmp"
    torch.save(state, temporary)
    os.replace(temporary, path)


def timed(iterable):
    """Yields ``(item, seconds waited for it)``."""
    iterator = iter(iterable)
    while True:
        start = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield item, time.perf_counter() - start


def digest(tensor):
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def main(argv=None):
    args = parse_args(argv)
    device = setup(args.seed, args.device)
    model = build_model(args.model, args.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    if args.from_memory is not None:
        from_memory(args, model, optimizer, loss_fn, device)
        return

    # loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True, num_workers=8)
    loader = sophon.Loader(socket=args.socket, timeout=args.timeout, device=device)
    held_out = (sophon.Loader(socket=args.eval_socket, timeout=args.timeout, device=device)
                if args.eval_socket else None)

    step = 0
    if args.resume:
        state = torch.load(args.resume)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        step = state["step"]
    dump = open(args.dump_batches, "a") if args.dump_batches else None

    images_seen, waited, started = 0, 0.0, time.perf_counter()
    last_eval = {}
    while loader.epoch < args.epochs and (args.max_steps is None or step < args.max_steps):
        epoch = loader.epoch
        correct, seen = 0, 0
        for (images, labels), wait in timed(loader):
            waited += wait
            batch = loader.state_dict()["batches"] - 1
            if len(labels) == 0:
                continue  # every sample of the batch failed (the agent's --on-error skip)
            if int(labels.max()) >= args.num_classes:
                sys.exit(f"label {int(labels.max())} is not below --num-classes {args.num_classes}")
            labels = labels.to(device, non_blocking=True)
            logits, loss = train_step(model, optimizer, loss_fn, images, labels, args.amp)
            if args.eval_every_epoch:
                correct += int((logits.argmax(1) == labels).sum().item())
                seen += len(labels)
            step += 1
            images_seen += len(labels)
            value = loss.item()
            print(json.dumps({"epoch": epoch, "step": step, "batch": batch, "loss": value,
                              "loss_hex": value.hex(), "images": len(labels)}), flush=True)
            if dump:
                dump.write(json.dumps({"epoch": epoch, "batch": batch,
                                       "images_sha256": digest(images),
                                       "labels_sha256": digest(labels)}) + "\n")
                dump.flush()
            if args.state_out:
                save_state(args.state_out, model, optimizer, loader, step)
            if step == args.kill_after_step:
                os._exit(3)
            if args.max_steps is not None and step >= args.max_steps:
                break
        if args.eval_every_epoch:
            last_eval = {"eval": True, "epoch": epoch,
                         "train_accuracy": correct / seen if seen else None, "train_images": seen}
            if held_out is not None:
                accuracy, mean_loss, images = evaluate(model, held_out, loss_fn, device,
                                                       args.num_classes)
                last_eval.update(accuracy=accuracy, loss=mean_loss, images=images)
            print(json.dumps(last_eval), flush=True)
    loader.close()
    if held_out is not None:
        held_out.close()
    seconds = time.perf_counter() - started
    summary = {"summary": True, "amp": args.amp, "steps": step, "images": images_seen,
               "seconds": round(seconds, 6),
               "images_per_s": round(images_seen / seconds, 3) if seconds else None,
               "wait_s": round(waited, 6)}
    for key in ("train_accuracy", "accuracy"):
        if key in last_eval:
            summary[key] = last_eval[key]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
