"""Inputs and float64 checks shared by the kernel harnesses (interpreter and one-GPU).

Data is seeded from (seed, rank, call), on the CPU, so every harness and every rank can
rebuild any rank's input and the float64 reference of any call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-5


def make_input(seed: int, rank: int, call: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank ``rank``'s flat input of call ``call`` (CPU); element 1 is -0.0 when n > 3."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + call)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    if n > 3:
        x[1] = -0.0  # the push sentinel's value must survive as zero
    return x.to(dtype)


def fused_inputs(rank: int, call: int, shape: tuple[int, int], dtype: torch.dtype):
    """x differs per rank; residual and weight are replicated, as in tensor parallelism."""
    rows, hidden = shape
    x = make_input(1, rank, call, rows * hidden, dtype).view(rows, hidden)
    res = make_input(2, 0, call, rows * hidden, dtype).view(rows, hidden)
    w = make_input(3, 0, call, hidden, dtype)
    return x, res, w


def all_reduce_reference(world: int, call: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """The float64 sum of every rank's ``make_input(0, rank, call, n, dtype)``."""
    return sum(make_input(0, r, call, n, dtype).double() for r in range(world))


def check_all_reduce(label: str, world: int, call: int, n: int, dtype: torch.dtype,
                     outs: Sequence[torch.Tensor]) -> None:
    """Every rank's output is bitwise rank 0's, and close to the float64 reference."""
    outs = [o.cpu() for o in outs]
    for r in range(1, world):
        assert torch.equal(outs[0], outs[r]), \
            f"{label} {dtype} n={n}: rank {r} differs from rank 0"
    ref = all_reduce_reference(world, call, n, dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    err = (outs[0].double() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err < tol, f"{label} {dtype} n={n}: relative error {err:.3g}"


def check_fused(label: str, world: int, call: int, shape: tuple[int, int], dtype: torch.dtype,
                outs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Every rank's (normed, new_residual) is bitwise rank 0's, and close to float64."""
    from commrt.symm_mem.fused_rmsnorm import reference

    outs = [(y.cpu(), z.cpu()) for y, z in outs]
    assert all(torch.equal(outs[0][0], y) and torch.equal(outs[0][1], z) for y, z in outs), \
        f"fused {label}: ranks differ"
    xs = [fused_inputs(r, call, shape, dtype) for r in range(world)]
    y, z = reference(sum(x.double() for x, _, _ in xs), xs[0][1], xs[0][2], EPS)
    for name, got, ref in (("normed", outs[0][0], y), ("new_residual", outs[0][1], z.double())):
        err = (got.double() - ref).norm() / ref.norm()
        assert err < 2e-2, f"fused {label} {dtype} {shape} {name}: {err:.3g}"
