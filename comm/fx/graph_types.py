"""What the overlap pass's steps share: the collective record and node helpers.

The steps (``hoist``, ``bucketing``, ``stalls``, ``memory``, ``comm_groups``) import from
here and from each other one way only; ``overlap`` imports them all and none imports it.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

aten = torch.ops.aten
WAIT = torch.ops._c10d_functional.wait_tensor.default
# Ops whose result aliases their first input: free to compute, alive as long as it is.
VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default,
         aten.t.default, aten.permute.default, aten.expand.default, aten.slice.Tensor,
         aten.select.int, aten.squeeze.dim, aten.unsqueeze.default, aten.alias.default}
# Kinds of commrt's ops (``commrt.ops``): each runs on the compute stream and returns a
# finished tensor, so its ``Coll`` starts and ends at the one node and nothing hides it.
SYNC_KINDS = frozenset({"commrt_all_reduce", "commrt_all_gather", "commrt_reduce_scatter"})
# Kinds the bucketing leaves alone: their inputs are not packed into one buffer.
UNBUCKETED = frozenset({"commrt_all_gather", "commrt_reduce_scatter"})


@dataclasses.dataclass
class Coll:
    """One collective of the graph, as the pass moves and merges it."""

    start: fx.Node
    end: fx.Node  # the wait (or the node itself for commrt's ops, ``SYNC_KINDS``)
    kind: str
    group: str
    key: tuple  # (kind, group, op, dtype): what may share a bucket
    nbytes: int


def node_val(n):
    """The fake tensor (``meta["val"]``) of ``n``; None for a constant or a missing one."""
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def static_bytes(v) -> int | None:
    """Bytes of the tensor ``v``; None for a non-tensor or a symbolic shape."""
    if not isinstance(v, torch.Tensor):
        return None
    numel = v.numel()
    if isinstance(numel, torch.SymInt):  # dynamic shape: not ours to move or merge
        return None
    return int(numel) * v.element_size()
