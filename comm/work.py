"""Work handles and reduce-op names shared by the collectives of ``Communicator``.

A call that commrt runs on its own kernels is already enqueued on the current stream
when it returns, so its ``async_op`` handle (``_DoneWork``) has nothing left to wait for,
unless it wraps the process group's handle and a copy to make once that completes.
``op_name`` and ``_funcol_op`` spell a ``ReduceOp`` as the dispatcher and torch's
functional collectives do.
"""

from __future__ import annotations

import torch

_OP_NAMES: dict = {}


def _funcol_op(op) -> str:
    """The functional collectives' name of ``op`` (traceable by torch.compile)."""
    import torch.distributed._functional_collectives as funcol

    return funcol.REDUCE_OP_TO_STR[op]


def op_name(op) -> str:
    """``ReduceOp.SUM`` / ``RedOpType.SUM`` -> ``'sum'`` (cached: this is the hot path)."""
    name = _OP_NAMES.get(op)
    if name is None:
        name = (getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]).lower()
        _OP_NAMES[op] = name
    return name


class _DoneWork:
    """Work handle for a call already enqueued on the current stream (custom kernels)."""

    def __init__(self, result: torch.Tensor | None = None, after=None, inner=None):
        self._result, self._after, self._inner = result, after, inner

    def wait(self, timeout=None) -> bool:
        if self._inner is not None:
            self._inner.wait()
            self._inner = None
        if self._after is not None:
            self._after()
            self._after = None
        return True

    def is_completed(self) -> bool:
        return self._inner is None or self._inner.is_completed()

    def is_success(self) -> bool:
        return True

    def result(self):
        return [self._result] if self._result is not None else []
