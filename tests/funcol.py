"""Functional all-gather and reduce-scatter along dim 0, spelled the same on every
supported torch: the ``_c10d_functional`` ops and ``wait_tensor`` (torch 2.15 deprecates
``all_gather_tensor`` / ``reduce_scatter_tensor`` for ``*_single``, which 2.11 lacks)."""

from __future__ import annotations

import torch
import torch.distributed as dist

_ops = torch.ops._c10d_functional


def all_gather(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    out = _ops.all_gather_into_tensor(x.contiguous(), group.size(), group.group_name)
    return _ops.wait_tensor(out)


def reduce_scatter(x: torch.Tensor, op: str, group: dist.ProcessGroup) -> torch.Tensor:
    out = _ops.reduce_scatter_tensor(x.contiguous(), op, group.size(), group.group_name)
    return _ops.wait_tensor(out)
