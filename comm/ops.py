"""``torch.ops.commrt.*``: the custom ops torch.compile traces and CUDA graphs capture.

Three layers per op: the typed public function (``commrt.all_reduce``), the
``torch.library`` op with its schema (below), and a fake implementation that also reads
as the reference of what the op computes (shape and dtype of the input, summed over
the group).
"""

from __future__ import annotations

import torch

lib = torch.library.Library("commrt", "DEF")
lib.define("all_reduce(Tensor input, str group_name) -> Tensor")
lib.define("all_reduce_residual_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps, "
           "str group_name) -> (Tensor, Tensor)")


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
