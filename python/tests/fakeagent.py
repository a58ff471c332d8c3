"""A compute agent's trainer side in Python, for the client's tests.

It packs frames and slot headers from docs/handoff.md by itself rather than
with sophon.protocol, so that a misreading of the contract would have to be
made twice to go unnoticed. One rank (world 1) is served per connection;
each connection is served by a thread of its own.

Run as a script it serves until interrupted:
``python3 python/tests/fakeagent.py --socket /tmp/x.sock --samples 40 --shape 224 224``.
"""

import argparse
import base64
import json
import mmap
import os
import select
import socket
import struct
import threading
import time

import numpy as np

HELLO, WELCOME, EPOCH, READY, RELEASE, END, ERROR, STATUS = range(1, 9)
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
HEADER = 128


def reference_float(images, normalize):
    """to_tensor (and normalize) of uint8 NHWC ``images`` in numpy float32, as NCHW."""
    x = images.astype(np.float32) / np.float32(255)
    if normalize is not None:
        x = (x - np.array(normalize["mean"], np.float32)) / np.array(normalize["std"], np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


class FakeAgent:
    """Serves ``samples`` synthetic images on the Unix socket ``path``.

    ``script`` maps a batch index to actions run before that batch is sent
    (in every epoch): ``("sleep", s)``, ``("status", text)``, ``("status_for",
    seconds, every, text)``, ``("stall",)`` (send nothing more until stopped),
    ``("close",)``, ``("error", code, text)`` and ``("end",)`` (END now).
    ``welcome`` overrides WELCOME fields; ``hello_error`` answers HELLO with
    that ``(code, text)`` ERROR. ``tamper(ring, offset, epoch, batch)``, if
    given, may spoil each slot after it is filled. Received frames are kept in ``hellos``,
    ``epochs`` and ``releases`` (dicts with epoch, batch, slot, wait_ns);
    contract violations by the client in ``violations``. ``ring`` is the
    latest connection's mapping of its ring.
    """

    def __init__(self, path, samples=10, batch_size=4, shape=(8, 12), dtype="uint8",
                 slots=2, strict_order=True, drop_last=False, to_tensor=True, normalize=IMAGENET,
                 welcome=None, hello_error=None, script=None, tamper=None, failed_batches=()):
        self.path = path
        # Batches whose every sample failed (the agent's --on-error skip):
        # served with no rows.
        self.failed_batches = set(failed_batches)
        self.samples, self.batch_size, self.shape = samples, batch_size, tuple(shape)
        self.dtype, self.slots = dtype, slots
        self.strict_order, self.drop_last = strict_order, drop_last
        self.to_tensor, self.normalize = to_tensor, normalize
        self.overrides = welcome or {}
        self.hello_error = hello_error
        self.script = script or {}
        self.tamper = tamper
        self.hellos, self.epochs, self.releases, self.violations = [], [], [], []
        self.ring = None
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(4)
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._run, daemon=True)

    # The data.

    def image(self, sample):
        """Sample ``sample``'s uint8 HWC image; each has every byte value."""
        h, w = self.shape
        values = np.random.default_rng(sample).permutation(h * w * 3) % 256
        return values.astype(np.uint8).reshape(h, w, 3)

    def label(self, sample):
        return (sample * 7) % 10

    def sample_id(self, sample):
        return 1000 + sample

    def order(self, epoch):
        """The epoch's samples in order (no padding: world is 1)."""
        order = np.random.default_rng(100 + epoch).permutation(self.samples)
        if self.drop_last:
            order = order[:self.samples // self.batch_size * self.batch_size]
        return [int(s) for s in order]

    @property
    def batches_per_epoch(self):
        n = len(self.order(0))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_samples(self, epoch, batch):
        """The samples of batch ``batch`` of ``epoch`` in a run from its start."""
        return self.order(epoch)[batch * self.batch_size:(batch + 1) * self.batch_size]

    # Layout.

    @property
    def row_shape(self):
        h, w = self.shape
        return [h, w, 3] if self.dtype == "uint8" else [3, h, w]

    @property
    def row_bytes(self):
        return int(np.prod(self.row_shape)) * (1 if self.dtype == "uint8" else 4)

    def offsets(self):
        """Offsets of images, labels, ids and positions in a slot, and the slot's size."""
        labels = HEADER + -(-self.batch_size * self.row_bytes // 8) * 8
        ids = labels + 8 * self.batch_size
        positions = ids + 8 * self.batch_size
        end = positions + 8 * self.batch_size
        return HEADER, labels, ids, positions, -(-end // 64) * 64

    def welcome(self, hello):
        *_, slot_bytes = self.offsets()
        message = {
            "protocol": 1, "agent": "fake", "version": "test", "fingerprint": "fp-test",
            "pipeline": "test", "samples": self.samples, "seed": 0,
            "rank": hello["rank"], "world": hello["world"], "local_rank": hello["local_rank"],
            "local_world": hello["local_world"], "batch_size": self.batch_size,
            "drop_last": self.drop_last, "strict_order": self.strict_order, "dtype": self.dtype,
            "layout": "NHWC" if self.dtype == "uint8" else "NCHW", "row_shape": self.row_shape,
            "slots": self.slots, "slot_bytes": slot_bytes, "header_bytes": HEADER,
            "batches_per_epoch": self.batches_per_epoch, "rows_per_epoch": len(self.order(0)),
            "positions_per_epoch": len(self.order(0)), "to_tensor": self.to_tensor,
            "normalize": self.normalize if self.to_tensor else None,
        }
        message.update(self.overrides)
        return message

    # Lifecycle.

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        """Stops accepting and ends every connection's serving thread."""
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._serve, args=(_Client(conn),), daemon=True).start()

    # Frames.

    def _send(self, client, kind, payload, fds=()):
        body = bytes([kind]) + payload
        data = struct.pack("<I", len(body)) + body
        if fds:
            socket.send_fds(client.conn, [data], fds)
        else:
            client.conn.sendall(data)

    def _send_json(self, client, kind, message):
        self._send(client, kind, json.dumps(message).encode())

    def _recv_exact(self, client, n):
        data = b""
        while len(data) < n:
            if self._stop.is_set():
                return None
            if client.readable(0.05):
                try:
                    chunk = client.conn.recv(n - len(data))
                except ConnectionResetError:
                    return None
                if not chunk:
                    return None
                data += chunk
        return data

    def _recv(self, client):
        head = self._recv_exact(client, 4)
        if head is None:
            return None
        body = self._recv_exact(client, struct.unpack("<I", head)[0])
        return None if body is None else (body[0], body[1:])

    # Serving.

    def _serve(self, client):
        with client.conn:
            try:
                self._converse(client)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away

    def _converse(self, client):
        frame = self._recv(client)
        if frame is None:
            return
        kind, payload = frame
        if kind != HELLO:
            self.violations.append(f"first frame {kind}")
            return
        hello = json.loads(payload)
        self.hellos.append(hello)
        if self.hello_error:
            code, text = self.hello_error
            self._send_json(client, ERROR, {"code": code, "message": text})
            return
        self._welcome(client, self.welcome(hello))
        while True:
            frame = self._recv(client)
            if frame is None:
                return
            kind, payload = frame
            if kind == RELEASE:
                self._release(client, payload)
            elif kind == EPOCH:
                if not self._serve_epoch(client, json.loads(payload)):
                    return
            else:
                self.violations.append(f"frame {kind} between epochs")

    def _welcome(self, client, welcome):
        size = welcome["slots"] * welcome["slot_bytes"]
        fd = os.memfd_create("sophon-fake-ring", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        client.ring = self.ring = mmap.mmap(fd, size)
        client.free = list(range(self.slots))
        self._send(client, WELCOME, json.dumps(welcome).encode(), [fd])
        os.close(fd)

    def _release(self, client, payload):
        slot, zero, wait_ns = struct.unpack("<IIQ", payload)
        if zero != 0 or slot not in client.in_slot:
            self.violations.append(f"RELEASE slot {slot} zero {zero}")
            return
        epoch, batch = client.in_slot.pop(slot)
        self.releases.append({"epoch": epoch, "batch": batch, "slot": slot, "wait_ns": wait_ns,
                              "at": time.monotonic()})
        client.free.append(slot)

    def _read_while_serving(self, client, block):
        """Takes the client's frames: all there are, or (block) until a slot is free."""
        while (block and not client.free) or client.readable(0):
            frame = self._recv(client)
            if frame is None:
                return False
            kind, payload = frame
            if kind != RELEASE:
                self.violations.append(f"frame {kind} during an epoch")
                return False
            self._release(client, payload)
        return True

    def _chunks(self, epoch, resume):
        """(batch index, [(position, sample)]) of what is left of the epoch."""
        rows = list(enumerate(self.order(epoch)))
        start = 0
        if resume is not None:
            start = resume["batches"]
            if resume["consumed"] is None:
                rows = rows[start * self.batch_size:]
            else:
                bits = base64.b64decode(resume["consumed"])
                rows = [(p, s) for p, s in rows if not bits[p >> 3] >> (p & 7) & 1]
        chunks = [rows[i:i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        return [(start + i, chunk) for i, chunk in enumerate(chunks)]

    def _serve_epoch(self, client, message):
        self.epochs.append(message)
        epoch = message["epoch"]
        sent = 0
        for index, rows in self._chunks(epoch, message["resume"]):
            go_on = self._act(client, index)
            if go_on is None:
                break
            if not go_on or not self._read_while_serving(client, block=True):
                return False
            slot = client.free.pop(0)
            if index in self.failed_batches:
                rows = []
            self._fill(client.ring, slot, epoch, index, rows)
            if self.tamper:
                self.tamper(client.ring, slot * self.offsets()[-1], epoch, index)
            client.in_slot[slot] = (epoch, index)
            self._send(client, READY, struct.pack("<IIQQ", slot, len(rows), epoch, index))
            sent += 1
        self._send_json(client, END, {"epoch": epoch, "batches": sent, "samples": 0})
        return True

    def _act(self, client, index):
        """Runs the script before batch ``index``: True to go on, False to
        stop serving the connection, None to end the epoch now."""
        for action in self.script.get(index, ()):
            name = action[0]
            if name == "sleep":
                time.sleep(action[1])
            elif name == "status":
                self._send_json(client, STATUS, {"message": action[1]})
            elif name == "status_for":
                seconds, every, text = action[1:]
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    self._send_json(client, STATUS, {"message": text})
                    time.sleep(every)
            elif name == "stall":
                self._stop.wait()
                return False
            elif name == "close":
                return False
            elif name == "error":
                self._send_json(client, ERROR, {"code": action[1], "message": action[2]})
                return False
            elif name == "end":
                return None
        return True

    def _fill(self, ring, slot, epoch, index, rows):
        images_at, labels_at, ids_at, positions_at, slot_bytes = self.offsets()
        base = slot * slot_bytes
        n = len(rows)
        samples = [s for _, s in rows]
        images = (np.stack([self.image(s) for s in samples]) if samples
                  else np.zeros((0, *self.shape, 3), np.uint8))
        if self.dtype == "float32":
            images = reference_float(images, self.normalize)
        dtype_code, layout_code = (1, 1) if self.dtype == "uint8" else (2, 2)
        header = struct.pack("<IHBBII4IQQQQQQ", 0x42485053, 1, dtype_code, layout_code, n,
                             self.batch_size, n, *self.row_shape, epoch, index,
                             images_at, labels_at, ids_at, positions_at)
        ring[base:base + HEADER] = header.ljust(HEADER, b"\0")
        ring[base + images_at:base + images_at + images.nbytes] = images.tobytes()
        for at, values in ((labels_at, [self.label(s) for s in samples]),
                           (ids_at, [self.sample_id(s) for s in samples]),
                           (positions_at, [p for p, _ in rows])):
            ring[base + at:base + at + 8 * n] = np.array(values, "<u8").tobytes()


class _Client:
    """One connection's state: its socket, ring, free slots and the batch in each full slot."""

    def __init__(self, conn):
        self.conn = conn
        self.ring = None
        self.free = []
        self.in_slot = {}

    def readable(self, timeout):
        return bool(select.select([self.conn], [], [], timeout)[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--shape", type=int, nargs=2, default=[224, 224])
    parser.add_argument("--dtype", default="uint8", choices=["uint8", "float32"])
    parser.add_argument("--completion-order", action="store_true")
    args = parser.parse_args()
    agent = FakeAgent(args.socket, samples=args.samples, batch_size=args.batch_size,
                      shape=args.shape, dtype=args.dtype, strict_order=not args.completion_order)
    agent.start()
    print(f"serving {args.samples} samples on {args.socket}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        agent.stop()


if __name__ == "__main__":
    main()
