"""commrt: the all-reduce tensor-parallel code reaches for first.

    import commrt
    comm = commrt.init()                 # after dist.init_process_group, before capture
    comm.all_reduce(t)                   # in place, like dist.all_reduce
    commrt.all_reduce(t)                 # module-level drop-in
    torch.ops.commrt.all_reduce(t, name) # functional custom op (torch.compile, CUDA graphs)
    commrt.stats()                       # {op: {algorithm: calls}} since start or reset
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import ops as _ops  # noqa: F401  (registers torch.ops.commrt.*)
from .communicator import Communicator
from .dispatch.dispatcher import Decision
from .errors import CommrtError, ConfigError, MismatchError, PeerTimeoutError, WorkspaceError
from .patch import patch, patched, unpatch
from .registry import get as _get
from .stats import stats

__version__ = "0.1.0"

__all__ = ["Communicator", "Decision", "CommrtError", "ConfigError", "MismatchError",
           "PeerTimeoutError", "WorkspaceError", "init", "all_reduce", "plan", "stats",
           "patch", "patched", "unpatch"]

_SUM = dist.ReduceOp.SUM
_is_compiling = torch.compiler.is_compiling


def init(group: dist.ProcessGroup | None = None) -> Communicator:
    """Create (or return) the communicator of ``group``; call it before graph capture."""
    return _get(group)


@torch.compiler.assume_constant_result
def _world_name() -> str:
    return dist.group.WORLD.group_name


def all_reduce(tensor: torch.Tensor, op=_SUM, group=None, async_op: bool = False,
               out: torch.Tensor | None = None):
    """Drop-in for ``dist.all_reduce`` through the group's cached communicator."""
    if _is_compiling():
        name = group.group_name if group is not None else _world_name()
        res = torch.ops.commrt.all_reduce(tensor, name)
        return (out if out is not None else tensor).copy_(res)
    return _get(group).all_reduce(tensor, op, async_op, out)


def plan(tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> Decision:
    """What ``all_reduce(tensor)`` would run, and why."""
    return _get(group).plan(tensor, op)
