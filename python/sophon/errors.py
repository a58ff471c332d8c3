"""The errors the trainer client raises.

Every one of them derives from :class:`SophonError`, and the ones that have a
standard library counterpart derive from it too (``except ConnectionError``
and ``except TimeoutError`` catch them), so a training script can tell "no
agent", "the agent said no", "the agent went quiet" and "the bytes on the
wire make no sense" apart.
"""


class SophonError(Exception):
    """Base class of the client's errors."""


class AgentNotRunning(SophonError, ConnectionError):
    """No compute agent listens on the trainer socket."""


class ProtocolError(SophonError):
    """The agent sent something the hand-off contract does not allow."""


class AgentError(SophonError):
    """The agent reported an error or closed the connection.

    ``code`` is the ERROR frame's code (``FAILED``, ``PEER_LOST``, ...) or
    ``CLOSED`` when the connection ended without one; ``message`` is the
    agent's own text.
    """

    def __init__(self, code: str, message: str, context: str = "") -> None:
        self.code = code
        self.message = message
        text = f"compute agent error {code}: {message}"
        super().__init__(f"{text} ({context})" if context else text)


class MismatchError(AgentError):
    """The agent serves something other than what the trainer asked for.

    Raised for the agent's ERROR ``MISMATCH`` and ``DATASET`` and for a
    WELCOME whose fields contradict the Loader's arguments (``code`` is then
    ``MISMATCH`` too), and for a resume state that does not fit the agent's
    epoch.
    """


class AgentTimeout(SophonError, TimeoutError):
    """No frame arrived from the agent within the Loader's ``timeout``."""
