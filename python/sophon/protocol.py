"""Frames, messages and the slot header of the trainer hand-off protocol.

This module is the wire contract of docs/handoff.md in Python and nothing
more: it knows the frame format, the message codecs and the slot header, not
what a training loop does with them (that is :mod:`sophon.loader`).
"""

import array
import json
import math
import os
import socket
import struct
import time
from collections import namedtuple

from .errors import ProtocolError

PROTOCOL = 1
CLIENT = "sophon-python/0.1"

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

Ready = namedtuple("Ready", "slot rows epoch batch")
Ready.__doc__ = "A READY frame: slot ``slot`` holds ``rows`` rows of batch ``batch`` of ``epoch``."

SlotHeader = namedtuple(
    "SlotHeader",
    "magic version dtype layout rows capacity shape epoch batch "
    "images labels ids positions")
SlotHeader.__doc__ = ("A slot's 128-byte header; the last four fields are offsets from the "
                      "slot's start.")


class Connection:
    """A framed, connected Unix stream socket.

    Every read goes through ``recvmsg`` so that a file descriptor passed with
    ``SCM_RIGHTS`` is kept whichever read its bytes arrive in; the WELCOME
    handler takes it with :meth:`take_fds`.
    """

    def __init__(self, sock):
        self._sock = sock
        self._buffer = bytearray()
        self._fds = []

    def send(self, kind, payload, timeout):
        """Sends one frame; raises TimeoutError or OSError as the socket does."""
        body = bytes([kind]) + payload
        self._sock.settimeout(timeout)
        self._sock.sendall(_LENGTH.pack(len(body)) + body)

    def recv(self, timeout):
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

    def take_fds(self):
        """Returns the descriptors received so far and forgets them."""
        fds, self._fds = self._fds, []
        return fds

    def close(self):
        """Closes the socket and any descriptor nobody took."""
        for fd in self.take_fds():
            os.close(fd)
        self._sock.close()

    def _parse(self):
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

    def _fill(self, timeout):
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


def encode_json(message):
    """Encodes a JSON message payload."""
    return json.dumps(message, separators=(",", ":")).encode()


def decode_json(kind, payload):
    """Decodes a JSON payload that must be an object."""
    try:
        message = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"{NAMES.get(kind, kind)} payload is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{NAMES.get(kind, kind)} payload is not a JSON object")
    return message


def hello(rank, world, local_rank, local_world, batch_size, drop_last, strict_order, dtype,
          fingerprint):
    """The HELLO message; None (or 0, "") means "whatever the agent serves"."""
    return {
        "protocol": PROTOCOL, "client": CLIENT, "pid": os.getpid(),
        "rank": rank, "world": world, "local_rank": local_rank, "local_world": local_world,
        "batch_size": batch_size or 0, "drop_last": drop_last, "strict_order": strict_order,
        "dtype": dtype or "", "fingerprint": fingerprint or "",
    }


def epoch_message(epoch, resume):
    """The EPOCH message; ``resume`` is None or ``{"batches": k, "consumed": base64 or None}``."""
    return {"epoch": epoch, "resume": resume}


def decode_ready(payload):
    """Decodes a READY payload."""
    if len(payload) != _READY.size:
        raise ProtocolError(f"READY payload of {len(payload)} bytes, want {_READY.size}")
    return Ready(*_READY.unpack(payload))


def encode_release(slot, wait_ns):
    """Encodes a RELEASE payload."""
    return _RELEASE.pack(slot, 0, wait_ns)


def read_header(buffer, offset):
    """Reads the slot header at ``offset`` of ``buffer``."""
    fields = _HEADER.unpack_from(buffer, offset)
    return SlotHeader(*fields[:6], tuple(fields[6:10]), *fields[10:])


class Welcome:
    """The WELCOME message, type-checked; the raw object is ``info``."""

    _INTS = ("protocol", "rank", "world", "local_rank", "local_world", "batch_size", "slots",
             "slot_bytes", "header_bytes", "batches_per_epoch", "rows_per_epoch",
             "positions_per_epoch")
    _BOOLS = ("drop_last", "strict_order", "to_tensor")

    def __init__(self, info):
        self.info = info
        for key in self._INTS:
            setattr(self, key, _field(info, key, int))
        for key in self._BOOLS:
            setattr(self, key, _field(info, key, bool))
        self.dtype = _field(info, "dtype", str)
        self.layout = _field(info, "layout", str)
        self.fingerprint = _field(info, "fingerprint", str)
        self.row_shape = tuple(_field(info, "row_shape", list))
        self.normalize = info.get("normalize")
        self._check()

    @property
    def channels(self):
        """Channels per pixel: the last row dimension in NHWC, the first in NCHW."""
        return self.row_shape[-1] if self.layout == "NHWC" else self.row_shape[0]

    @property
    def row_elements(self):
        """Image elements per row."""
        return math.prod(self.row_shape)

    def _check(self):
        if self.protocol != PROTOCOL:
            raise ProtocolError(f"agent speaks protocol {self.protocol}, this client {PROTOCOL}")
        if self.dtype not in DTYPE_LAYOUT:
            raise ProtocolError(f"WELCOME dtype {self.dtype!r} is neither uint8 nor float32")
        if self.layout != DTYPE_LAYOUT[self.dtype]:
            raise ProtocolError(f"WELCOME layout {self.layout} for dtype {self.dtype}, "
                                f"want {DTYPE_LAYOUT[self.dtype]}")
        if len(self.row_shape) != 3 or not all(isinstance(d, int) and d > 0
                                               for d in self.row_shape):
            raise ProtocolError(f"WELCOME row_shape {list(self.row_shape)} is not 3 positive ints")
        if self.header_bytes != HEADER_BYTES:
            raise ProtocolError(f"WELCOME header_bytes {self.header_bytes}, want {HEADER_BYTES}")
        if self.slots < 1 or self.batch_size < 1:
            raise ProtocolError(f"WELCOME has {self.slots} slots of batch size {self.batch_size}")
        itemsize = 1 if self.dtype == "uint8" else 4
        need = HEADER_BYTES + self.batch_size * (self.row_elements * itemsize + 3 * 8)
        if self.slot_bytes < need:
            raise ProtocolError(f"WELCOME slot_bytes {self.slot_bytes} < {need} needed")
        self._check_normalize()

    def _check_normalize(self):
        if self.normalize is None:
            return
        if not self.to_tensor:
            raise ProtocolError("WELCOME has normalize without to_tensor")
        if not isinstance(self.normalize, dict):
            raise ProtocolError("WELCOME normalize is not an object")
        for key in ("mean", "std"):
            values = self.normalize.get(key)
            if (not isinstance(values, list) or len(values) != self.channels
                    or not all(isinstance(v, (int, float)) for v in values)):
                raise ProtocolError(f"WELCOME normalize.{key} is not {self.channels} numbers")
        if any(s == 0 for s in self.normalize["std"]):
            raise ProtocolError("WELCOME normalize.std has a zero")


def _field(info, key, kind):
    value = info.get(key)
    # bool is an int in Python; JSON true must not pass for a count.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"WELCOME field {key!r} is {value!r}, want {kind.__name__}")
    return value
