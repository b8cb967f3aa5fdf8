"""One cached Communicator per process group, for the module-level calls and the ops."""

from __future__ import annotations

import torch.distributed as dist

from commrt.communicator import Communicator

_BY_NAME: dict[str, Communicator] = {}


def get(group: dist.ProcessGroup | None = None) -> Communicator:
    """The communicator of ``group`` (default: the world), created on first use."""
    if group is None:
        if not dist.is_initialized():
            from commrt.errors import CommrtError

            raise CommrtError("torch.distributed is not initialised; call "
                              "dist.init_process_group() first")
        group = dist.group.WORLD
    comm = _BY_NAME.get(group.group_name)
    if comm is None:
        comm = Communicator(group)
        _BY_NAME[group.group_name] = comm
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
