"""sophon: the PyTorch trainer client of the SOPHON compute agent.

``sophon.Loader`` replaces a ``torch.utils.data.DataLoader`` in a training
script: it receives the batches the node's compute agent prepared, through a
Unix socket and a shared-memory ring (docs/handoff.md), and yields them as
torch tensors. See python/README.md and docs/training.md.
"""

from ._version import __version__
from .errors import (AgentError, AgentNotRunning, AgentTimeout, MismatchError, ProtocolError,
                     SophonError)
from .loader import IterableDataset, Loader
from .protocol import Normalize, Welcome
from .session import RawBatch

__all__ = ["Loader", "IterableDataset", "RawBatch", "Welcome", "Normalize", "SophonError",
           "AgentNotRunning", "ProtocolError", "AgentError", "MismatchError", "AgentTimeout"]
