"""commrt: the all-reduce tensor-parallel code reaches for first.

    import commrt
    comm = commrt.init()                 # after dist.init_process_group, before capture
    comm.all_reduce(t)                   # in place, like dist.all_reduce
    commrt.all_reduce(t)                 # module-level drop-in
    commrt.all_gather_into_tensor(out, t)  # and reduce_scatter_tensor(out, t): as torch's
    torch.ops.commrt.all_reduce(t, name) # functional custom ops (torch.compile, CUDA graphs):
                                         # also all_gather / reduce_scatter (dim 0)
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
           "PeerTimeoutError", "WorkspaceError", "init", "all_reduce", "all_gather_into_tensor",
           "reduce_scatter_tensor", "plan", "stats", "patch", "patched", "unpatch"]

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


@torch.compiler.assume_constant_result
def _world_size() -> int:
    return dist.get_world_size()


def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor, group=None,
                           async_op: bool = False):
    """Drop-in for ``dist.all_gather_into_tensor`` through the group's communicator."""
    if _is_compiling():
        name, size = (group.group_name, group.size()) if group is not None else \
            (_world_name(), _world_size())
        res = torch.ops.commrt.all_gather(input.reshape(-1), size, name)
        output.copy_(res.view(output.shape))
        return None
    return _get(group).all_gather_into_tensor(output, input, async_op)


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op=None, group=None,
                          async_op: bool = False):
    """Drop-in for ``dist.reduce_scatter_tensor`` through the group's communicator (no
    ``op``: a sum)."""
    if _is_compiling():
        from .communicator import _funcol_op

        name, size = (group.group_name, group.size()) if group is not None else \
            (_world_name(), _world_size())
        res = torch.ops.commrt.reduce_scatter(input.reshape(-1), _funcol_op(op), size, name)
        output.copy_(res.view(output.shape))
        return None
    return _get(group).reduce_scatter_tensor(output, input, _SUM if op is None else op,
                                             async_op)


def plan(tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> Decision:
    """What ``all_reduce(tensor)`` would run, and why."""
    return _get(group).plan(tensor, op)
