"""The trainer-side end of the image pipeline: uint8 NHWC to float32 NCHW.

With dtype uint8 the agent stops before ``to_tensor`` and ``normalize`` and
the client finishes them with one table lookup per byte. The table is
computed with the same float32 operations, in the same order, as the agent's
fused ``to_tensor+normalize`` (and torchvision's ``to_tensor`` then
``normalize``), so the result is byte-identical to the agent's float32 output.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt
import torch

from .protocol import Normalize


def lut(channels: int, to_tensor: bool,
        normalize: Union[Normalize, Mapping[str, Sequence[float]], None]
        ) -> Optional[npt.NDArray[np.float32]]:
    """Returns the per-channel table, float32 of shape ``(channels, 256)``.

    ``lut[c, v]`` is ``(float32(v) / 255 - mean[c]) / std[c]`` computed in
    float32 scalar arithmetic, or ``float32(v) / 255`` without ``normalize``
    (a WELCOME's :class:`~sophon.protocol.Normalize`, or a mapping with
    ``"mean"`` and ``"std"``); None when ``to_tensor`` is false (the images
    stay uint8).
    """
    if not to_tensor:
        return None
    if isinstance(normalize, Normalize):
        normalize = {"mean": normalize.mean, "std": normalize.std}
    table = np.empty((channels, 256), np.float32)
    scale = np.float32(255)
    for c in range(channels):
        for v in range(256):
            x = np.float32(v) / scale
            if normalize is not None:
                x = (x - np.float32(normalize["mean"][c])) / np.float32(normalize["std"][c])
            table[c, v] = x
    return table


def apply_numpy(table: npt.NDArray[np.float32], images: npt.NDArray[np.uint8]) -> torch.Tensor:
    """Maps uint8 NHWC ``images`` through ``table`` into a new float32 NCHW tensor (CPU)."""
    n, h, w, channels = images.shape
    out = np.empty((n, channels, h, w), np.float32)
    for c in range(channels):
        out[:, c] = table[c][images[..., c]]
    return torch.from_numpy(out)


def apply_torch(table: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Maps a uint8 NHWC tensor through ``table`` (a flat float32 tensor of
    ``channels * 256`` values on the images' device) into a new float32 NCHW
    tensor on that device."""
    channels = images.shape[-1]
    offsets = torch.arange(channels, device=images.device) * 256
    index = (images.long() + offsets).reshape(-1)
    return torch.index_select(table, 0, index).view(images.shape).permute(0, 3, 1, 2).contiguous()
