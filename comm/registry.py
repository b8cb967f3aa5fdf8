"""One cached Communicator per process group, for the module-level calls and the ops."""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.distributed_c10d import _world

from commrt.communicator import Communicator

_BY_NAME: dict[str, Communicator] = {}
_BY_GROUP: dict = {}  # ProcessGroup object -> its communicator (the hot path: one dict get)


def get(group: dist.ProcessGroup | None = None) -> Communicator:
    """The communicator of ``group`` (default: the world), created on first use."""
    if group is None:
        group = _world.default_pg  # dist.group.WORLD without its property frame
        if group is None:
            from commrt.errors import CommrtError

            raise CommrtError("torch.distributed is not initialised; call "
                              "dist.init_process_group() first")
    comm = _BY_GROUP.get(group)
    if comm is None:
        comm = _BY_NAME.get(group.group_name)
        if comm is None or comm.group is not group:
            comm = Communicator(group)
            _BY_NAME[group.group_name] = comm
        _BY_GROUP[group] = comm
    return comm


def for_group_name(name: str) -> Communicator:
    comm = _BY_NAME.get(name)
    if comm is None:
        from torch.distributed.distributed_c10d import _resolve_process_group

        comm = get(_resolve_process_group(name))
    return comm


def reset() -> None:
    """Forget every communicator (frees their workspaces); for tests and re-init."""
    for comm in _BY_NAME.values():
        comm.close()
    _BY_NAME.clear()
    _BY_GROUP.clear()
