"""Work handles and reduce-op names shared by the collectives of ``Communicator``.

A call that commrt runs on its own kernels is already enqueued on the current stream
when it returns, so its ``async_op`` handle (``_DoneWork``) has nothing left to wait for,
unless it wraps the process group's handle and a copy to make once that completes.
``op_name`` and ``_funcol_op`` spell a ``ReduceOp`` as the dispatcher and torch's
functional collectives do.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as _funcol

_OP_NAMES: dict = {}
_FUNCOL_NAMES = tuple(_funcol.REDUCE_OP_TO_STR.items())  # (ReduceOp, "sum"), ...


def _funcol_op(op) -> str:
    """The functional collectives' name of ``op`` (None: a sum), traceable by torch.compile
    on every supported torch: found by identity in a tuple, as Dynamo of torch 2.11 cannot
    hash a ``RedOpType`` (no dict lookup, no dict iteration)."""
    if op is None:
        return "sum"
    for known, name in _FUNCOL_NAMES:
        if op is known:
            return name
    raise ValueError(f"{op} has no functional-collective name; expected one of "
                     + ", ".join(name for _, name in _FUNCOL_NAMES))


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
