"""commrt's exceptions."""


class CommrtError(RuntimeError):
    """Base class of every error commrt raises on purpose."""


class ConfigError(CommrtError, ValueError):
    """A ``COMMRT_*`` variable, a tuning table or a forced algorithm is not valid."""


class MismatchError(CommrtError):
    """Ranks called a collective with different shapes, dtypes or ops (``COMMRT_CHECK=1``)."""


class PeerTimeoutError(CommrtError):
    """A kernel waited past ``COMMRT_SPIN_TIMEOUT`` for a peer that never arrived."""


class WorkspaceError(CommrtError):
    """The symmetric workspace cannot serve the request (e.g. growing it during capture)."""
