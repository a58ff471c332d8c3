"""The training loop's side: :class:`Loader` and :class:`IterableDataset`.

A Loader stands where a ``torch.utils.data.DataLoader`` stood: iterating it
runs one epoch and yields ``(images, labels)`` (``(images, labels, ids)``
with ``with_ids=True``) as torch tensors. The compute agent has already
decoded, augmented and batched the samples; the Loader only maps them out of
the shared ring, finishes ``to_tensor``/``normalize`` for uint8 batches and
keeps the state a checkpoint needs to resume mid-epoch.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import mmap
import os
import warnings
from typing import Any, Dict, Generator, Iterator, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from . import images as finish
from . import protocol
from .errors import MismatchError
from .protocol import Welcome
from .session import RawBatch, Session

Batch = Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""What iterating a Loader yields: ``(images, labels)``, or ``(images, labels, ids)`` with
``with_ids=True``."""
StateDict = Dict[str, Any]
""":meth:`Loader.state_dict`'s plain dict."""

DEFAULT_SOCKET = "/tmp/sophon.sock"
STATE_VERSION = 1
_DTYPES = ("uint8", "float32")
_STATE_KEYS = ("version", "epoch", "batches", "strict_order", "rank", "world", "consumed",
               "auto_epoch")


class Loader:
    """Batches from the node's compute agent, as a DataLoader would yield them.

    Arguments left None take what the agent serves; any other value must
    match it (else :class:`MismatchError`). ``socket`` defaults to
    ``$SOPHON_SOCKET`` or ``/tmp/sophon.sock``; ``rank``, ``world``,
    ``local_rank`` and ``local_world`` to ``$RANK``, ``$WORLD_SIZE``,
    ``$LOCAL_RANK`` and ``$LOCAL_WORLD_SIZE`` (defaults 0, 1, rank, world),
    as torchrun sets them. The connection is made on the first ``len()`` or
    iteration.

    Each iteration is one epoch. ``images`` is a float32 NCHW tensor (uint8
    NHWC, as served, when the agent's pipeline has no ``to_tensor``),
    ``labels`` int64 and ``ids`` the sample ids as int64 (the agent's uint64
    ids, all below 2**63). All of them are on ``device``.

    ``copy=True`` copies every batch out of the ring and hands the slot back
    at once. ``copy=False`` yields tensors that view the ring: they are only
    valid until the next batch is requested or the iteration ends, when the
    slot goes back to the agent and is refilled. A uint8 batch finished by
    the normalize table is a new tensor either way, so its slot goes back
    at once too. With ``device="cuda"`` the ring is registered as pinned
    memory and each batch is copied to the GPU on a side stream (``copy``
    makes no difference there); its slot goes back, once the copy finished,
    when the next batch is requested.

    Leaving an iteration before its END (``break``, an exception) closes the
    connection, so the agent abandons the epoch (the other local ranks get
    ``PEER_LOST``: a DDP job cannot go on without a rank); the next
    iteration reconnects and starts its epoch afresh. Resuming mid-epoch is
    :meth:`state_dict` and :meth:`load_state_dict`.

    A batch with no rows is skipped (with a ``RuntimeWarning``) unless
    ``yield_empty=True``. The agent sends one only when every sample it could
    fill the batch with failed under ``--on-error skip`` (docs/training.md);
    it still counts towards ``len()`` and :meth:`state_dict`'s ``batches``.
    Under DDP a skipped batch leaves this rank a step behind the others:
    pass ``yield_empty=True`` there and keep the collectives paired.
    """

    def __init__(self, socket: Optional[str] = None, batch_size: Optional[int] = None,
                 drop_last: Optional[bool] = None, strict_order: Optional[bool] = None,
                 dtype: Optional[str] = None, device: Union[str, torch.device] = "cpu",
                 copy: bool = True, timeout: float = 120.0, fingerprint: Optional[str] = None,
                 with_ids: bool = False, rank: Optional[int] = None, world: Optional[int] = None,
                 local_rank: Optional[int] = None, local_world: Optional[int] = None,
                 yield_empty: bool = False) -> None:
        self.socket = socket or os.environ.get("SOPHON_SOCKET") or DEFAULT_SOCKET
        self.rank = _env_int(rank, "RANK", 0)
        self.world = _env_int(world, "WORLD_SIZE", 1)
        self.local_rank = _env_int(local_rank, "LOCAL_RANK", self.rank)
        self.local_world = _env_int(local_world, "LOCAL_WORLD_SIZE", self.world)
        if not (0 <= self.rank < self.world and 0 <= self.local_rank < self.local_world):
            raise ValueError(f"rank {self.rank} of {self.world}, local rank {self.local_rank} "
                             f"of {self.local_world}: each must lie in 0..size-1")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size {batch_size!r}: a positive int or None")
        if dtype is not None and dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r}: one of {', '.join(_DTYPES)} or None")
        if not timeout > 0:
            raise ValueError(f"timeout {timeout!r}: a positive number of seconds")
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.strict_order = strict_order
        self.dtype = dtype
        self.fingerprint = fingerprint
        self.device = _device(device)
        self.copy = copy
        self.timeout = float(timeout)
        self.with_ids = with_ids
        self.yield_empty = yield_empty
        self._session: Optional[Session] = None
        self._welcome: Optional[Welcome] = None
        self._table: Optional[npt.NDArray[np.float32]] = None
        self._cuda: Optional[_Cuda] = None
        # The epoch the next iteration runs, and whether it moves on by
        # itself after each complete pass (until set_epoch is called).
        self._epoch = 0
        self._auto = True
        # What was consumed of the latest epoch, and a loaded state the next
        # iteration resumes from.
        self._progress: Optional[_Progress] = None
        self._pending: Optional[_Progress] = None

    def __len__(self) -> int:
        """Batches per epoch for this rank (WELCOME's ``batches_per_epoch``)."""
        return self._open().welcome.batches_per_epoch

    @property
    def info(self) -> Welcome:
        """The agent's WELCOME (:class:`sophon.Welcome`): batch size, dtype,
        row shape, normalisation, dataset fingerprint, ... (connects if need
        be). ``info.to_dict()`` is the JSON object the agent sent."""
        return self._open().welcome

    def __iter__(self) -> Iterator[Batch]:
        with contextlib.closing(self._epoch_batches()) as batches:
            for batch in batches:
                tensors = self._tensors(batch)
                yield tensors if self.with_ids else tensors[:2]

    def raw_batches(self) -> Iterator[RawBatch]:
        """Iterates one epoch as :class:`~sophon.session.RawBatch` objects:
        numpy views of the slots, as served, each valid until the next one is
        requested or the iteration ends. This is the iterator the tensors
        come from, without the tensors."""
        return self._epoch_batches()

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs (connects when a loaded state
        needs ``len`` to tell whether its epoch was complete)."""
        if self._pending is not None:
            self._settle(len(self))
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iterations run ``epoch``, as DistributedSampler's
        set_epoch; epochs no longer move on by themselves after this."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch {epoch!r}: a non-negative int")
        self._epoch = epoch
        self._auto = False

    def state_dict(self) -> StateDict:
        """The position in the data as a plain, picklable dict.

        ``epoch`` is the latest epoch iterated and ``batches`` the number of
        its batches yielded so far (a complete pass has ``len(loader)``);
        ``consumed`` is, in completion order, the bitmap (bit ``g`` is byte
        ``g >> 3``, bit ``g & 7``) of the global positions of the rows
        yielded, and None in strict order.
        """
        progress = self._progress
        if progress is None:
            strict = self._welcome.strict_order if self._welcome else self.strict_order
            progress = _Progress(self._epoch, 0, strict, None)
        return {
            "version": STATE_VERSION, "epoch": progress.epoch, "batches": progress.batches,
            "strict_order": progress.strict_order, "rank": self.rank, "world": self.world,
            "consumed": None if progress.consumed is None else progress.consumed.tobytes(),
            "auto_epoch": self._auto,
        }

    def load_state_dict(self, state: StateDict) -> None:
        """Restores :meth:`state_dict`'s position: the next iteration of the
        saved epoch sends the agent the batches and positions already
        consumed and yields the rest of the epoch. A saved epoch that was
        complete moves on to the next one (in explicit ``set_epoch`` mode,
        iterating that same epoch again yields nothing)."""
        progress = _check_state(state, self.rank, self.world)
        self._epoch = progress.epoch
        self._auto = state["auto_epoch"]
        self._progress = progress
        self._pending = progress if progress.batches > 0 else None

    def close(self) -> None:
        """Closes the connection (the ring stays mapped while tensors view it)."""
        if self._session is not None:
            self._drop(self._session)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _epoch_batches(self) -> Generator[RawBatch, None, None]:
        """One epoch's RawBatches: the single path both iterators take."""
        if self._session is not None and self._session.in_epoch:
            self._drop(self._session)
        session = self._open()
        epoch, resume = self._plan(session.welcome)
        progress = resume or _Progress.fresh(epoch, session.welcome)
        self._progress = progress
        if progress.batches == session.welcome.batches_per_epoch:
            return
        finished = False
        try:
            session.start_epoch(epoch, progress.batches, None if resume is None else resume.wire())
            while (batch := session.next_batch()) is not None:
                progress.record(batch)
                if batch.rows == 0 and not self.yield_empty:
                    _warn_empty(batch)
                else:
                    yield batch
                batch.release()
            finished = True
        finally:
            if not finished:
                self._drop(session)
        if self._auto:
            self._epoch = epoch + 1

    def _open(self) -> Session:
        if self._session is not None:
            return self._session
        hello = protocol.hello(self.rank, self.world, self.local_rank, self.local_world,
                               self.batch_size, self.drop_last, self.strict_order, self.dtype,
                               self.fingerprint)
        session = Session(self.socket, hello, self.timeout)
        try:
            self._check_welcome(session.welcome)
            welcome = session.welcome
            table = None
            if welcome.dtype == "uint8":
                table = finish.lut(welcome.channels, welcome.to_tensor, welcome.normalize)
            self._cuda = _Cuda(session.ring, self.device, table) \
                if self.device.type == "cuda" else None
        except BaseException:
            session.close()
            raise
        self._session, self._welcome, self._table = session, welcome, table
        return session

    def _drop(self, session: Session) -> None:
        if session is self._session:
            if self._cuda is not None:
                self._cuda.close()
                self._cuda = None
            self._session = None
        session.close()

    def _check_welcome(self, welcome: Welcome) -> None:
        asked = {"batch_size": self.batch_size, "drop_last": self.drop_last,
                 "strict_order": self.strict_order, "dtype": self.dtype,
                 "fingerprint": self.fingerprint, "rank": self.rank, "world": self.world,
                 "local_rank": self.local_rank, "local_world": self.local_world}
        wrong = [f"{key}: asked {value!r}, served {getattr(welcome, key)!r}"
                 for key, value in asked.items()
                 if value is not None and value != getattr(welcome, key)]
        if wrong:
            raise MismatchError("MISMATCH", "the agent's WELCOME contradicts the Loader's "
                                "arguments: " + "; ".join(wrong), f"socket {self.socket}")

    def _settle(self, batches_per_epoch: int) -> None:
        """A loaded state whose epoch was complete moves auto epochs on."""
        pending = self._pending
        if (self._auto and pending is not None and pending.epoch == self._epoch
                and pending.batches >= batches_per_epoch):
            self._epoch += 1
            self._pending = None

    def _plan(self, welcome: Welcome) -> Tuple[int, Optional[_Progress]]:
        """The next iteration's epoch and the loaded progress it resumes (or None)."""
        self._settle(welcome.batches_per_epoch)
        pending = self._pending
        if pending is not None and pending.epoch == self._epoch:
            pending.check(welcome, self.socket)
        else:
            pending = None
        self._pending = None
        return self._epoch, pending

    def _tensors(self, batch: RawBatch) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._cuda is not None:
            return self._cuda.tensors(batch)
        # A normalised batch is a new tensor already: its slot can go back.
        owned = self.copy or self._table is not None
        if self._table is not None:
            images = finish.apply_numpy(self._table, batch.images)
        else:
            images = torch.from_numpy(batch.images)
        labels = torch.from_numpy(batch.labels)
        ids = torch.from_numpy(batch.ids.view(np.int64))
        if owned:
            if self._table is None:
                images = images.clone()
            labels, ids = labels.clone(), ids.clone()
            batch.release()
        return images, labels, ids


class IterableDataset(torch.utils.data.IterableDataset[Batch]):
    """A :class:`Loader` as a torch IterableDataset, for code that wants a
    DataLoader: ``DataLoader(sophon.IterableDataset(...), batch_size=None,
    num_workers=0)``. It takes the Loader's arguments; the Loader is
    ``.loader``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.loader = Loader(*args, **kwargs)

    def __iter__(self) -> Iterator[Batch]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                "sophon.IterableDataset needs DataLoader(..., num_workers=0): the compute "
                "agent already runs the preprocessing workers, and each DataLoader worker "
                "process would open its own connection to the agent as the same rank")
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`Loader.set_epoch`."""
        self.loader.set_epoch(epoch)

    def state_dict(self) -> StateDict:
        """See :meth:`Loader.state_dict`."""
        return self.loader.state_dict()

    def load_state_dict(self, state: StateDict) -> None:
        """See :meth:`Loader.load_state_dict`."""
        self.loader.load_state_dict(state)


class _Progress:
    """What the consumer was handed of one epoch: the batch count and, in
    completion order, the bitmap of the rows' global positions."""

    def __init__(self, epoch: int, batches: int, strict_order: Optional[bool],
                 consumed: Optional[npt.NDArray[np.uint8]]) -> None:
        self.epoch = epoch
        self.batches = batches
        self.strict_order = strict_order
        self.consumed = consumed

    @classmethod
    def fresh(cls, epoch: int, welcome: Welcome) -> _Progress:
        """Nothing consumed yet of ``epoch``."""
        bitmap = None
        if not welcome.strict_order:
            bitmap = np.zeros((welcome.positions_per_epoch + 7) // 8, np.uint8)
        return cls(epoch, 0, welcome.strict_order, bitmap)

    def record(self, batch: RawBatch) -> None:
        """Counts a yielded batch and marks its rows' positions."""
        self.batches += 1
        if self.consumed is not None:
            positions = batch.positions.astype(np.int64)
            np.bitwise_or.at(self.consumed, positions >> 3,
                             np.left_shift(1, positions & 7).astype(np.uint8))

    def wire(self) -> Dict[str, Any]:
        """EPOCH's ``resume`` object."""
        consumed = None
        if self.consumed is not None:
            consumed = base64.b64encode(self.consumed.tobytes()).decode()
        return {"batches": self.batches, "consumed": consumed}

    def check(self, welcome: Welcome, socket: str) -> None:
        """Raises MismatchError when this progress cannot resume the agent's epoch."""
        problem = None
        need = (welcome.positions_per_epoch + 7) // 8
        if self.strict_order is not None and self.strict_order != welcome.strict_order:
            problem = (f"the state was saved with strict_order={self.strict_order}, the agent "
                       f"serves strict_order={welcome.strict_order}")
        elif self.batches > welcome.batches_per_epoch:
            problem = (f"the state has {self.batches} batches consumed, the agent's epoch "
                       f"has {welcome.batches_per_epoch}")
        elif not welcome.strict_order and (self.consumed is None or len(self.consumed) != need):
            have = "no" if self.consumed is None else f"a {len(self.consumed)}-byte"
            problem = (f"the state has {have} consumed bitmap, the agent's epoch has "
                       f"{welcome.positions_per_epoch} positions ({need} bytes)")
        if problem:
            raise MismatchError("MISMATCH", "cannot resume: " + problem, f"socket {socket}")


class _Cuda:
    """Copies slots to a CUDA device: the ring is registered as pinned host
    memory, the copy runs on a side stream, the current stream waits for it,
    and the slot goes back to the agent once the copy's event completed."""

    def __init__(self, ring: mmap.mmap, device: torch.device,
                 table: Optional[npt.NDArray[np.float32]]) -> None:
        self.device = device
        pointer = ctypes.c_char.from_buffer(ring)
        self._address = ctypes.addressof(pointer)
        del pointer
        torch.cuda.check_error(torch.cuda.cudart().cudaHostRegister(self._address, len(ring), 0))
        self._stream = torch.cuda.Stream(device)
        self._table: Optional[torch.Tensor] = None
        if table is not None:
            self._table = torch.from_numpy(table.reshape(-1)).to(device)

    def tensors(self, batch: RawBatch) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch's images, labels and ids on the device, normalised."""
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            host = (batch.images, batch.labels, batch.ids.view(np.int64))
            moved = [torch.from_numpy(a).to(self.device, non_blocking=True) for a in host]
            done = torch.cuda.Event()
            done.record(self._stream)
        current.wait_stream(self._stream)
        for tensor in moved:
            tensor.record_stream(current)  # type: ignore[arg-type]
        batch.release_after(done)
        images, labels, ids = moved
        if self._table is not None:
            images = finish.apply_torch(self._table, images)
        return images, labels, ids

    def close(self) -> None:
        """Waits for the copies and unregisters the ring."""
        self._stream.synchronize()
        torch.cuda.check_error(torch.cuda.cudart().cudaHostUnregister(self._address))


def _check_state(state: Any, rank: int, world: int) -> _Progress:
    """Validates a state_dict and returns its progress."""
    if not isinstance(state, dict) or any(key not in state for key in _STATE_KEYS):
        raise ValueError("not a sophon.Loader state_dict: want a dict with "
                         + ", ".join(_STATE_KEYS))
    if state["version"] != STATE_VERSION:
        raise ValueError(f"state_dict version {state['version']!r}: this client reads "
                         f"version {STATE_VERSION}")
    if (state["rank"], state["world"]) != (rank, world):
        raise ValueError(f"the state_dict is rank {state['rank']} of {state['world']}, this Loader "
                         f"is rank {rank} of {world}: load each rank's own checkpoint, with the "
                         "same world size")
    epoch, batches, strict, consumed = (state[k] for k in ("epoch", "batches", "strict_order",
                                                            "consumed"))
    if not (isinstance(epoch, int) and epoch >= 0 and isinstance(batches, int) and batches >= 0):
        raise ValueError(f"state_dict epoch {epoch!r} and batches {batches!r}: non-negative ints")
    if strict not in (True, False, None) or not isinstance(state["auto_epoch"], bool):
        raise ValueError("state_dict strict_order and auto_epoch: bools")
    if consumed is not None and (strict or not isinstance(consumed, (bytes, bytearray))):
        raise ValueError("state_dict consumed: bytes in completion order, None in strict order")
    if strict is False and batches > 0 and consumed is None:
        raise ValueError("state_dict consumed: completion order needs the positions bitmap")
    bitmap = None if consumed is None else np.frombuffer(consumed, np.uint8).copy()
    return _Progress(epoch, batches, strict, bitmap)


def _warn_empty(batch: RawBatch) -> None:
    warnings.warn(f"sophon.Loader: batch {batch.batch} of epoch {batch.epoch} has no rows (every "
                  "sample the agent could fill it with failed under --on-error skip): skipped; "
                  "under DDP pass yield_empty=True to keep the ranks' steps paired",
                  RuntimeWarning, stacklevel=4)


def _env_int(value: Optional[int], name: str, default: int) -> int:
    if value is not None:
        return int(value)
    text = os.environ.get(name)
    return int(text) if text else default


def _device(spec: Union[str, torch.device]) -> torch.device:
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            warnings.warn("sophon.Loader: CUDA is not available, batches stay on the CPU",
                          RuntimeWarning, stacklevel=3)
            return torch.device("cpu")
        return torch.device("cuda", torch.cuda.current_device() if device.index is None
                            else device.index)
    if device.type != "cpu":
        raise ValueError(f"device {device}: cpu or cuda")
    return device
