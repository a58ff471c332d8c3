"""Frames, messages and the slot header of the trainer hand-off protocol.

This module is the wire contract of docs/handoff.md in Python and nothing
more: it knows the frame format, the message codecs and the slot header, not
what a training loop does with them (that is :mod:`sophon.loader`).
"""

from __future__ import annotations

import array
import copy
import json
import math
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Type, TypeVar

from ._version import __version__
from .errors import ProtocolError

PROTOCOL = 1
CLIENT = f"sophon-python/{__version__}"

# A frame is a u32 little-endian body length, then the body: one type byte
# and the payload. The agent refuses bodies over 16 MiB and so does the client.
MAX_FRAME = 16 << 20

HELLO = 0x01
WELCOME = 0x02
EPOCH = 0x03
READY = 0x04
RELEASE = 0x05
END = 0x06
ERROR = 0x07
STATUS = 0x08

NAMES = {HELLO: "HELLO", WELCOME: "WELCOME", EPOCH: "EPOCH", READY: "READY",
         RELEASE: "RELEASE", END: "END", ERROR: "ERROR", STATUS: "STATUS"}

# The slot header (128 bytes at the start of every slot).
SLOT_MAGIC = 0x42485053  # the bytes "SPHB"
SLOT_VERSION = 1
HEADER_BYTES = 128
DTYPE_CODES = {"uint8": 1, "float32": 2}
LAYOUT_CODES = {"NHWC": 1, "NCHW": 2}
# The layout each dtype is shipped in: uint8 crops before to_tensor, float32
# tensors after the whole pipeline.
DTYPE_LAYOUT = {"uint8": "NHWC", "float32": "NCHW"}

_LENGTH = struct.Struct("<I")
_READY = struct.Struct("<IIQQ")
_RELEASE = struct.Struct("<IIQ")
_HEADER = struct.Struct("<IHBBII4IQQQQQQ")

# At most this many descriptors are accepted with one read; the agent sends one.
_MAX_FDS = 4
_RECV_BYTES = 1 << 16

_T = TypeVar("_T")


class Ready(NamedTuple):
    """A READY frame: slot ``slot`` holds ``rows`` rows of batch ``batch`` of ``epoch``."""

    slot: int
    rows: int
    epoch: int
    batch: int


class SlotHeader(NamedTuple):
    """A slot's 128-byte header; the last four fields are offsets from the slot's start."""

    magic: int
    version: int
    dtype: int
    layout: int
    rows: int
    capacity: int
    shape: Tuple[int, int, int, int]
    epoch: int
    batch: int
    images: int
    labels: int
    ids: int
    positions: int


class Connection:
    """A framed, connected Unix stream socket.

    Every read goes through ``recvmsg`` so that a file descriptor passed with
    ``SCM_RIGHTS`` is kept whichever read its bytes arrive in; the WELCOME
    handler takes it with :meth:`take_fds`.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._fds: List[int] = []

    def send(self, kind: int, payload: bytes, timeout: float) -> None:
        """Sends one frame; raises TimeoutError or OSError as the socket does."""
        body = bytes([kind]) + payload
        self._sock.settimeout(timeout)
        self._sock.sendall(_LENGTH.pack(len(body)) + body)

    def recv(self, timeout: float) -> Tuple[int, bytes]:
        """Returns the next frame as ``(kind, payload)``.

        Raises TimeoutError when no whole frame arrived within ``timeout``
        seconds, EOFError when the peer closed the connection, and
        ProtocolError for a frame length outside 1..16 MiB.
        """
        deadline = time.monotonic() + timeout
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame within the timeout")
            self._fill(remaining)

    def take_fds(self) -> List[int]:
        """Returns the descriptors received so far and forgets them."""
        fds, self._fds = self._fds, []
        return fds

    def close(self) -> None:
        """Closes the socket and any descriptor nobody took."""
        for fd in self.take_fds():
            os.close(fd)
        self._sock.close()

    def _parse(self) -> Optional[Tuple[int, bytes]]:
        if len(self._buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(self._buffer)
        if not 1 <= length <= MAX_FRAME:
            raise ProtocolError(f"frame length {length} outside 1..{MAX_FRAME}")
        end = _LENGTH.size + length
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[_LENGTH.size:end])
        del self._buffer[:end]
        return body[0], body[1:]

    def _fill(self, timeout: float) -> None:
        self._sock.settimeout(timeout)
        data, ancillary, flags, _ = self._sock.recvmsg(
            _RECV_BYTES, socket.CMSG_SPACE(_MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC)
        for level, kind, cdata in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                self._fds.extend(fds)
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError("the agent passed more file descriptors than one ring")
        if not data:
            raise EOFError("connection closed")
        self._buffer += data


def encode_json(message: Dict[str, Any]) -> bytes:
    """Encodes a JSON message payload."""
    return json.dumps(message, separators=(",", ":")).encode()


def decode_json(kind: int, payload: bytes) -> Dict[str, Any]:
    """Decodes a JSON payload that must be an object."""
    try:
        message = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"{NAMES.get(kind, kind)} payload is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{NAMES.get(kind, kind)} payload is not a JSON object")
    return message


def hello(rank: int, world: int, local_rank: int, local_world: int, batch_size: Optional[int],
          drop_last: Optional[bool], strict_order: Optional[bool], dtype: Optional[str],
          fingerprint: Optional[str]) -> Dict[str, Any]:
    """The HELLO message; None (or 0, "") means "whatever the agent serves"."""
    return {
        "protocol": PROTOCOL, "client": CLIENT, "pid": os.getpid(),
        "rank": rank, "world": world, "local_rank": local_rank, "local_world": local_world,
        "batch_size": batch_size or 0, "drop_last": drop_last, "strict_order": strict_order,
        "dtype": dtype or "", "fingerprint": fingerprint or "",
    }


def epoch_message(epoch: int, resume: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The EPOCH message; ``resume`` is None or ``{"batches": k, "consumed": base64 or None}``."""
    return {"epoch": epoch, "resume": resume}


def decode_ready(payload: bytes) -> Ready:
    """Decodes a READY payload."""
    if len(payload) != _READY.size:
        raise ProtocolError(f"READY payload of {len(payload)} bytes, want {_READY.size}")
    return Ready(*_READY.unpack(payload))


def encode_release(slot: int, wait_ns: int) -> bytes:
    """Encodes a RELEASE payload."""
    return _RELEASE.pack(slot, 0, wait_ns)


def read_header(buffer: Any, offset: int) -> SlotHeader:
    """Reads the slot header at ``offset`` of ``buffer``."""
    (magic, version, dtype, layout, rows, capacity, n, h, w, c, epoch, batch, images, labels,
     ids, positions) = _HEADER.unpack_from(buffer, offset)
    return SlotHeader(magic, version, dtype, layout, rows, capacity, (n, h, w, c), epoch, batch,
                      images, labels, ids, positions)


@dataclass(frozen=True)
class Normalize:
    """WELCOME's ``normalize``: the per-channel ``mean`` and ``std`` that follow ``to_tensor``."""

    mean: Tuple[float, ...]
    std: Tuple[float, ...]


@dataclass(frozen=True)
class Welcome:
    """The agent's WELCOME, the handshake's reply (docs/handoff.md), decoded and checked.

    :meth:`decode` builds one from the frame's JSON object and refuses what
    the contract does not allow; :meth:`to_dict` gives that object back as the
    agent sent it (fields this client does not know included). The wire
    format is the JSON object: this class is only its typed view.
    """

    protocol: int
    fingerprint: str
    rank: int
    world: int
    local_rank: int
    local_world: int
    batch_size: int
    drop_last: bool
    strict_order: bool
    dtype: str
    layout: str
    row_shape: Tuple[int, int, int]
    slots: int
    slot_bytes: int
    header_bytes: int
    batches_per_epoch: int
    rows_per_epoch: int
    positions_per_epoch: int
    to_tensor: bool
    normalize: Optional[Normalize] = None
    # Informational: which agent, its version and pipeline, the dataset's
    # sample count and the shuffle seed. The client checks their types only.
    agent: str = ""
    version: str = ""
    pipeline: str = ""
    samples: Optional[int] = None
    seed: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def decode(cls, info: Dict[str, Any]) -> "Welcome":
        """The WELCOME of the JSON object ``info``; raises ProtocolError when
        a field is missing, of the wrong type or contradicts the contract."""
        def integer(key: str) -> int:
            return _field(info, key, int)

        def flag(key: str) -> bool:
            return _field(info, key, bool)

        def text(key: str) -> str:
            return _field(info, key, str)

        row_shape = _field(info, "row_shape", list)
        if len(row_shape) != 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                          and d > 0 for d in row_shape):
            raise ProtocolError(f"WELCOME row_shape {row_shape} is not 3 positive ints")
        welcome = cls(
            protocol=integer("protocol"), fingerprint=text("fingerprint"), rank=integer("rank"),
            world=integer("world"), local_rank=integer("local_rank"),
            local_world=integer("local_world"), batch_size=integer("batch_size"),
            drop_last=flag("drop_last"), strict_order=flag("strict_order"), dtype=text("dtype"),
            layout=text("layout"), row_shape=(row_shape[0], row_shape[1], row_shape[2]),
            slots=integer("slots"), slot_bytes=integer("slot_bytes"),
            header_bytes=integer("header_bytes"), batches_per_epoch=integer("batches_per_epoch"),
            rows_per_epoch=integer("rows_per_epoch"),
            positions_per_epoch=integer("positions_per_epoch"), to_tensor=flag("to_tensor"),
            normalize=_normalize(info.get("normalize")),
            agent=_optional(info, "agent", str, ""), version=_optional(info, "version", str, ""),
            pipeline=_optional(info, "pipeline", str, ""),
            samples=_optional(info, "samples", int, None), seed=_optional(info, "seed", int, None),
            raw=copy.deepcopy(info))
        welcome._check(info.get("normalize"))
        return welcome

    def to_dict(self) -> Dict[str, Any]:
        """The WELCOME's JSON object, as the agent sent it."""
        return copy.deepcopy(self.raw)

    @property
    def channels(self) -> int:
        """Channels per pixel: the last row dimension in NHWC, the first in NCHW."""
        return self.row_shape[-1] if self.layout == "NHWC" else self.row_shape[0]

    @property
    def row_elements(self) -> int:
        """Image elements per row."""
        return math.prod(self.row_shape)

    def _check(self, normalize: Any) -> None:
        if self.protocol != PROTOCOL:
            raise ProtocolError(f"agent speaks protocol {self.protocol}, this client {PROTOCOL}")
        if self.dtype not in DTYPE_LAYOUT:
            raise ProtocolError(f"WELCOME dtype {self.dtype!r} is neither uint8 nor float32")
        if self.layout != DTYPE_LAYOUT[self.dtype]:
            raise ProtocolError(f"WELCOME layout {self.layout} for dtype {self.dtype}, "
                                f"want {DTYPE_LAYOUT[self.dtype]}")
        if self.header_bytes != HEADER_BYTES:
            raise ProtocolError(f"WELCOME header_bytes {self.header_bytes}, want {HEADER_BYTES}")
        if self.slots < 1 or self.batch_size < 1:
            raise ProtocolError(f"WELCOME has {self.slots} slots of batch size {self.batch_size}")
        itemsize = 1 if self.dtype == "uint8" else 4
        need = HEADER_BYTES + self.batch_size * (self.row_elements * itemsize + 3 * 8)
        if self.slot_bytes < need:
            raise ProtocolError(f"WELCOME slot_bytes {self.slot_bytes} < {need} needed")
        self._check_normalize(normalize)

    def _check_normalize(self, normalize: Any) -> None:
        if normalize is None:
            return
        if not self.to_tensor:
            raise ProtocolError("WELCOME has normalize without to_tensor")
        if not isinstance(normalize, dict):
            raise ProtocolError("WELCOME normalize is not an object")
        for key in ("mean", "std"):
            values = normalize.get(key)
            if (not isinstance(values, list) or len(values) != self.channels
                    or not all(isinstance(v, (int, float)) for v in values)):
                raise ProtocolError(f"WELCOME normalize.{key} is not {self.channels} numbers")
        if any(s == 0 for s in normalize["std"]):
            raise ProtocolError("WELCOME normalize.std has a zero")


def _normalize(value: Any) -> Optional[Normalize]:
    """The typed ``normalize`` of a WELCOME; Welcome._check_normalize checks it afterwards."""
    if not isinstance(value, dict):
        return None
    mean, std = value.get("mean"), value.get("std")
    if not isinstance(mean, list) or not isinstance(std, list):
        return None
    return Normalize(tuple(mean), tuple(std))


def _field(info: Dict[str, Any], key: str, kind: Type[_T]) -> _T:
    value = info.get(key)
    # bool is an int in Python; JSON true must not pass for a count.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"WELCOME field {key!r} is {value!r}, want {kind.__name__}")
    return value


def _optional(info: Dict[str, Any], key: str, kind: Type[_T], default: Any) -> Any:
    if info.get(key) is None:
        return default
    return _field(info, key, kind)
