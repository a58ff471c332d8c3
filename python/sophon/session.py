"""One connection to the compute agent: handshake, shared ring, epoch protocol.

A :class:`Session` speaks the frames of docs/handoff.md and checks what the
agent sends against the contract; it knows nothing of tensors or training
state (:mod:`sophon.loader` builds those on top).
"""

from __future__ import annotations

import mmap
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from . import protocol
from .errors import AgentError, AgentNotRunning, AgentTimeout, MismatchError, ProtocolError
from .protocol import END, EPOCH, ERROR, HELLO, NAMES, READY, RELEASE, STATUS, WELCOME, Welcome

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch

# The agent's error codes that mean "not what you asked for".
_MISMATCH_CODES = ("MISMATCH", "DATASET")
_NUMPY_DTYPES: Dict[str, np.dtype[Any]] = {"uint8": np.dtype(np.uint8),
                                            "float32": np.dtype("<f4")}
_INT64 = np.dtype("<i8")
_UINT64 = np.dtype("<u8")


class RawBatch:
    """One batch as numpy views of its slot in the shared ring.

    ``images`` is uint8 NHWC or float32 NCHW as the agent serves, ``labels``
    int64, ``ids`` (sample ids) and ``positions`` (global positions in the
    epoch) uint64, each with ``rows`` rows. ``epoch`` and ``batch`` say which
    batch this is, ``wait_ns`` how long the consumer waited for it.

    The views are valid until :meth:`release` hands the slot back to the
    agent, which then refills it; the Loader releases a batch when the next
    one is requested or the iteration ends.
    """

    __slots__ = ("images", "labels", "ids", "positions", "epoch", "batch", "rows", "slot",
                 "wait_ns", "_session", "_after", "_released")

    images: npt.NDArray[Any]
    labels: npt.NDArray[np.int64]
    ids: npt.NDArray[np.uint64]
    positions: npt.NDArray[np.uint64]
    epoch: int
    batch: int
    rows: int
    slot: int
    wait_ns: int

    def __init__(self, session: Session, ready: protocol.Ready, wait_ns: int,
                 images: npt.NDArray[Any], labels: npt.NDArray[np.int64],
                 ids: npt.NDArray[np.uint64], positions: npt.NDArray[np.uint64]) -> None:
        self.images, self.labels, self.ids, self.positions = images, labels, ids, positions
        self.epoch, self.batch = ready.epoch, ready.batch
        self.rows, self.slot = ready.rows, ready.slot
        self.wait_ns = wait_ns
        self._session = session
        self._after: Optional[torch.cuda.Event] = None
        self._released = False

    def release_after(self, event: torch.cuda.Event) -> None:
        """Makes :meth:`release` wait for ``event`` (a copy still reading the slot) first."""
        self._after = event

    def release(self) -> None:
        """Hands the slot back to the agent; later calls do nothing."""
        if self._released:
            return
        self._released = True
        if self._after is not None:
            self._after.synchronize()
        self._session.release(self.slot, self.wait_ns)


class Session:
    """A connected, welcomed client: the WELCOME is ``welcome``, the mapped
    ring ``ring``. Every blocking read waits at most ``timeout`` seconds for
    a frame (a STATUS frame counts)."""

    welcome: Welcome
    ring: mmap.mmap

    def __init__(self, path: str, hello: Dict[str, Any], timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.closed = False
        self.in_epoch = False
        self.epoch: Optional[int] = None
        self.last_batch: Optional[int] = None
        self.last_status: Optional[str] = None
        self._held: Dict[int, RawBatch] = {}
        self._resumed = self._next = self._got = 0
        self._conn = protocol.Connection(_connect(path, timeout))
        try:
            self._send(HELLO, protocol.encode_json(hello))
            self.welcome, fd = self._handshake()
            try:
                self.ring = _map(fd, self.welcome)
            finally:
                os.close(fd)
        except BaseException:
            self.close()
            raise

    def start_epoch(self, epoch: int, resumed: int, resume: Optional[Dict[str, Any]]) -> None:
        """Releases any slot still held and sends EPOCH; ``resumed`` batches
        of the epoch were consumed before (``resume`` is their wire form)."""
        self._check_open()
        for batch in list(self._held.values()):
            batch.release()
        self._send(EPOCH, protocol.encode_json(protocol.epoch_message(epoch, resume)))
        self.epoch = epoch
        self.last_batch = None
        self.in_epoch = True
        self._resumed = resumed
        self._next = resumed
        self._got = 0

    def next_batch(self) -> Optional[RawBatch]:
        """Waits for the next READY and returns its :class:`RawBatch`, or None at END."""
        self._check_open()
        try:
            start = time.perf_counter_ns()
            kind, payload = self._frame()
            wait_ns = time.perf_counter_ns() - start
            if kind == END:
                self._end(protocol.decode_json(kind, payload))
                return None
            if kind != READY:
                raise ProtocolError(
                    f"unexpected {NAMES.get(kind, hex(kind))} frame during an epoch")
            return self._ready(protocol.decode_ready(payload), wait_ns)
        except ProtocolError as exc:
            raise ProtocolError(f"{exc} ({self._context()})") from None

    def release(self, slot: int, wait_ns: int) -> None:
        """Sends RELEASE for ``slot``; does nothing once the session is closed."""
        if self.closed:
            return
        del self._held[slot]
        self._send(RELEASE, protocol.encode_release(slot, wait_ns))

    def close(self) -> None:
        """Closes the connection. The ring stays mapped while views of it live."""
        if self.closed:
            return
        self.closed = True
        self.in_epoch = False
        self._held.clear()
        self._conn.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"the connection to {self.path} was closed "
                               "(the Loader was closed or a newer iteration started)")

    def _handshake(self) -> Tuple[Welcome, int]:
        try:
            kind, payload = self._frame()
            if kind != WELCOME:
                raise ProtocolError(f"agent answered HELLO with {NAMES.get(kind, hex(kind))}")
            fds = self._conn.take_fds()
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ProtocolError(f"WELCOME came with {len(fds)} file descriptors, want 1")
            try:
                return Welcome.decode(protocol.decode_json(kind, payload)), fds[0]
            except BaseException:
                os.close(fds[0])
                raise
        except ProtocolError as exc:
            raise ProtocolError(f"{exc} ({self._context()})") from None

    def _frame(self) -> Tuple[int, bytes]:
        """The next frame other than STATUS; an ERROR frame raises."""
        while True:
            try:
                kind, payload = self._conn.recv(self.timeout)
            except TimeoutError:
                raise AgentTimeout(f"no frame from the compute agent in {self.timeout:g} s "
                                   f"({self._context()})") from None
            except (EOFError, ConnectionResetError):
                raise AgentError("CLOSED", "the compute agent closed the connection",
                                 self._context()) from None
            if kind == STATUS:
                self.last_status = str(protocol.decode_json(kind, payload).get("message", ""))
            elif kind == ERROR:
                message = protocol.decode_json(kind, payload)
                code = str(message.get("code", ""))
                error = MismatchError if code in _MISMATCH_CODES else AgentError
                raise error(code, str(message.get("message", "")), self._context())
            else:
                return kind, payload

    def _send(self, kind: int, payload: bytes) -> None:
        try:
            self._conn.send(kind, payload, self.timeout)
        except TimeoutError:
            raise AgentTimeout(f"the compute agent took no {NAMES[kind]} frame in "
                               f"{self.timeout:g} s ({self._context()})") from None
        except (BrokenPipeError, ConnectionResetError):
            # The agent closed the connection. What it sent before closing
            # (an ERROR, say) is still to be read: the next read reports it.
            pass

    def _context(self) -> str:
        epoch = "none started" if self.epoch is None else self.epoch
        batch = "none yet" if self.last_batch is None else self.last_batch
        text = f"socket {self.path}, epoch {epoch}, last good batch {batch}"
        if self.last_status:
            text += f", last STATUS: {self.last_status!r}"
        return text

    def _end(self, message: Dict[str, Any]) -> None:
        if message.get("epoch") != self.epoch:
            raise ProtocolError(f"END for epoch {message.get('epoch')!r}")
        expected = self.welcome.batches_per_epoch - self._resumed
        if self._got != expected:
            raise ProtocolError(
                f"the agent ended the epoch after {self._got} READY frames, want {expected} "
                f"(batches_per_epoch {self.welcome.batches_per_epoch}, "
                f"resumed after {self._resumed})")
        self.in_epoch = False

    def _ready(self, ready: protocol.Ready, wait_ns: int) -> RawBatch:
        welcome = self.welcome
        if self._got == welcome.batches_per_epoch - self._resumed:
            raise ProtocolError(f"READY for batch {ready.batch} past the epoch's "
                                f"{welcome.batches_per_epoch} batches")
        if ready.epoch != self.epoch or ready.batch != self._next:
            raise ProtocolError(f"READY for epoch {ready.epoch} batch {ready.batch}, "
                                f"want epoch {self.epoch} batch {self._next}")
        if ready.slot >= welcome.slots:
            raise ProtocolError(f"READY for slot {ready.slot} of {welcome.slots}")
        # 0 rows: no sample the agent could fill the batch with succeeded
        # under --on-error skip (docs/training.md). It still counts, so
        # every rank gets batches_per_epoch READY frames; the Loader skips
        # it unless yield_empty=True.
        if not 0 <= ready.rows <= welcome.batch_size:
            raise ProtocolError(f"READY with {ready.rows} rows, batch size {welcome.batch_size}")
        batch = self._views(ready, wait_ns)
        self._held[ready.slot] = batch
        self._got += 1
        self._next += 1
        self.last_batch = ready.batch
        return batch

    def _views(self, ready: protocol.Ready, wait_ns: int) -> RawBatch:
        welcome = self.welcome
        base = ready.slot * welcome.slot_bytes
        header = protocol.read_header(self.ring, base)
        _check_header(header, ready, welcome)
        dtype = _NUMPY_DTYPES[welcome.dtype]
        capacity = welcome.batch_size
        regions: Tuple[Tuple[int, np.dtype[Any], int], ...] = (
                   (header.images, dtype, welcome.row_elements),
                   (header.labels, _INT64, 1), (header.ids, _UINT64, 1),
                   (header.positions, _UINT64, 1))
        views: List[npt.NDArray[Any]] = []
        for offset, kind, per_row in regions:
            if offset + capacity * per_row * kind.itemsize > welcome.slot_bytes:
                raise ProtocolError(f"slot {ready.slot}: a region at offset {offset} "
                                    f"overruns the slot's {welcome.slot_bytes} bytes")
            views.append(np.frombuffer(self.ring, kind, ready.rows * per_row, base + offset))
        images, labels, ids, positions = views
        if ready.rows and int(positions.max()) >= welcome.positions_per_epoch:
            raise ProtocolError(f"slot {ready.slot}: position {int(positions.max())} "
                                f"outside the epoch's {welcome.positions_per_epoch}")
        images = images.reshape((ready.rows,) + welcome.row_shape)
        return RawBatch(self, ready, wait_ns, images, labels, ids, positions)


def _check_header(header: protocol.SlotHeader, ready: protocol.Ready,
                  welcome: Welcome) -> None:
    want = {
        "magic": protocol.SLOT_MAGIC, "version": protocol.SLOT_VERSION,
        "dtype": protocol.DTYPE_CODES[welcome.dtype],
        "layout": protocol.LAYOUT_CODES[welcome.layout],
        "rows": ready.rows, "capacity": welcome.batch_size,
        "shape": (ready.rows,) + welcome.row_shape, "epoch": ready.epoch, "batch": ready.batch,
        "images": protocol.HEADER_BYTES,
    }
    wrong = [f"{key} {getattr(header, key)!r} (want {value!r})"
             for key, value in want.items() if getattr(header, key) != value]
    if wrong:
        raise ProtocolError(f"slot {ready.slot} header disagrees with its READY: "
                            + ", ".join(wrong))


def _connect(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise AgentNotRunning(
            f"no compute agent at {path} ({exc.strerror}): start one with "
            f"`compute-agent --trainer-socket {path} --storage HOST:PORT` (docs/training.md), "
            "or point socket= / SOPHON_SOCKET at the one that runs") from None
    except TimeoutError:
        sock.close()
        raise AgentTimeout(f"connecting to the compute agent at {path} took over {timeout:g} s") \
            from None
    except BaseException:
        sock.close()
        raise
    return sock


def _map(fd: int, welcome: Welcome) -> mmap.mmap:
    size = welcome.slots * welcome.slot_bytes
    have = os.fstat(fd).st_size
    if have < size:
        raise ProtocolError(f"the ring's memfd has {have} bytes, WELCOME says "
                            f"{welcome.slots} slots of {welcome.slot_bytes}")
    return mmap.mmap(fd, size)
