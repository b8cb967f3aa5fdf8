"""``torch.ops.commrt.*``: the custom ops torch.compile traces and CUDA graphs capture.

Three layers per op: the typed public function (``commrt.all_reduce``,
``commrt.all_gather_into_tensor``, ``commrt.reduce_scatter_tensor``), the ``torch.library``
op with its schema (below), and a fake implementation that also reads as the reference of
what the op computes. ``all_gather`` and ``reduce_scatter`` work on dim 0, as
``_c10d_functional.all_gather_into_tensor`` / ``reduce_scatter_tensor`` do, and return a
finished tensor (no ``wait_tensor``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

lib = torch.library.Library("commrt", "DEF")
lib.define("all_reduce(Tensor input, str group_name) -> Tensor")
lib.define("all_reduce_residual_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps, "
           "str group_name) -> (Tensor, Tensor)")
lib.define("ce_exchange(Tensor[] parts, str group_name, int offset, int total) -> Tensor")
lib.define("all_gather(Tensor input, int group_size, str group_name) -> Tensor")
lib.define("reduce_scatter(Tensor input, str reduce_op, int group_size, str group_name) -> Tensor")


def _all_reduce(input: torch.Tensor, group_name: str) -> torch.Tensor:
    from commrt.registry import for_group_name

    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    comm = for_group_name(group_name)
    comm.run_flat(input.contiguous().view(-1), out.view(-1))
    return out


def _all_reduce_fake(input: torch.Tensor, group_name: str) -> torch.Tensor:
    # sum over ranks of `input`: same shape and dtype, fresh contiguous storage
    return torch.empty_like(input, memory_format=torch.contiguous_format)


lib.impl("all_reduce", _all_reduce, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::all_reduce", _all_reduce_fake, lib=lib)


def _fused(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
           group_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    from commrt.registry import for_group_name

    normed, new_res = for_group_name(group_name).all_reduce_residual_rmsnorm(
        x, residual, weight, eps)
    return normed.contiguous(), new_res.contiguous()


def _fused_fake(x, residual, weight, eps, group_name):
    # new_residual = residual + sum over ranks of x;
    # normed = new_residual * rsqrt(mean(new_residual ** 2, -1) + eps) * weight
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(residual, memory_format=torch.contiguous_format))


lib.impl("all_reduce_residual_rmsnorm", _fused, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::all_reduce_residual_rmsnorm", _fused_fake, lib=lib)


def _ce_exchange(parts: list[torch.Tensor], group_name: str, offset: int,
                 total: int) -> torch.Tensor:
    import torch.distributed.distributed_c10d as c10d

    return c10d._resolve_process_group(group_name).exchange(parts, offset, total)


def _ce_exchange_fake(parts, group_name, offset, total):
    # every other rank's parts, flat and packed in order, in rank order (wait_tensor it);
    # the copy-engine group's exchange (commrt.copy_engine_group)
    import torch.distributed.distributed_c10d as c10d

    n = sum(p.numel() for p in parts)
    return parts[0].new_empty(((c10d._get_group_size_by_name(group_name) - 1) * n,))


lib.impl("ce_exchange", _ce_exchange, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::ce_exchange", _ce_exchange_fake, lib=lib)


def _all_gather(input: torch.Tensor, group_size: int, group_name: str) -> torch.Tensor:
    from commrt.registry import for_group_name

    out = _all_gather_fake(input, group_size, group_name)
    for_group_name(group_name).all_gather_into_tensor(out, input)
    return out


def _all_gather_fake(input: torch.Tensor, group_size: int, group_name: str) -> torch.Tensor:
    # torch.cat([input of rank r for r in range(group_size)], dim=0)
    torch._check(input.dim() > 0, lambda: "commrt::all_gather needs a tensor of 1+ dims")
    return input.new_empty((group_size * input.shape[0], *input.shape[1:]))


lib.impl("all_gather", _all_gather, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::all_gather", _all_gather_fake, lib=lib)

_REDUCE_OPS = {name.lower(): getattr(dist.ReduceOp, name)
               for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")}


def _reduce_scatter(input: torch.Tensor, reduce_op: str, group_size: int,
                    group_name: str) -> torch.Tensor:
    from commrt.registry import for_group_name

    op = _REDUCE_OPS.get(reduce_op)
    if op is None:
        raise ValueError(f"commrt::reduce_scatter: reduce_op {reduce_op!r} is not one of "
                         f"{', '.join(_REDUCE_OPS)}")
    out = _reduce_scatter_fake(input, reduce_op, group_size, group_name)
    for_group_name(group_name).reduce_scatter_tensor(out, input, op)
    return out


def _reduce_scatter_fake(input: torch.Tensor, reduce_op: str, group_size: int,
                         group_name: str) -> torch.Tensor:
    # the reduction (reduce_op) over ranks of input.chunk(group_size, dim=0)[rank]
    torch._check(input.dim() > 0 and input.shape[0] % group_size == 0,
                 lambda: f"commrt::reduce_scatter: dim 0 ({input.shape[0] if input.dim() else 0}"
                         f") must divide into {group_size} equal chunks")
    return input.new_empty((input.shape[0] // group_size, *input.shape[1:]))


lib.impl("reduce_scatter", _reduce_scatter, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::reduce_scatter", _reduce_scatter_fake, lib=lib)
