"""Inputs and checks shared by the kernel harnesses (interpreter and one-GPU).

Data is seeded from (seed, rank, call), on the CPU, so every harness and every rank can
rebuild any rank's input and the reference of any call: float64 for the all-reduces, the
inputs in rank order (bit for bit) for the all-gathers, the fp32 rank-order sum (bit for
bit) and float64 for the reduce-scatters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-5
LAMPORT_WORD32 = -2147450880  # 0x80008000: the fp32 receive slots' sentinel (one_shot_push)
_BITS = {2: torch.int16, 4: torch.int32}


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


def collective_input(algo: str, rank: int, call: int, n: int, dtype: torch.dtype,
                     world: int) -> torch.Tensor:
    """Rank ``rank``'s flat input of call ``call``: ``world * n`` elements for a
    reduce-scatter (``rs_*``), else ``n``; int32 data is the bits of random fp32."""
    count = world * n if algo.startswith("rs_") else n
    if dtype == torch.int32:
        return make_input(0, rank, call, count, torch.float32).view(torch.int32)
    return make_input(0, rank, call, count, dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as integers of its width (compares -0.0 and +0.0 apart)."""
    return t.view(_BITS[t.element_size()])


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


def all_gather_reference(algo: str, xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Every rank's all-gather output: the inputs ``xs`` in rank order, as ``algo`` delivers
    them. ``ag_push``'s receive slots carry a 16-bit -0.0 as +0.0 and the fp32 word
    ``0x80008000`` as ``0x80008001``; everything else arrives bit for bit."""
    want = torch.cat(list(xs))
    if algo != "ag_push":
        return want
    if want.element_size() == 2:
        return torch.where(want == 0, torch.zeros_like(want), want)
    words = bits(want)
    return torch.where(words == LAMPORT_WORD32, words + 1, words).view(want.dtype)


def check_all_gather(label: str, algo: str, xs: Sequence[torch.Tensor],
                     outs: Sequence[torch.Tensor]) -> None:
    """Every rank's output is bitwise ``all_gather_reference(algo, xs)``."""
    want = bits(all_gather_reference(algo, xs))
    for r, out in enumerate(outs):
        assert torch.equal(bits(out.cpu()), want), \
            f"{label}: rank {r} does not hold the inputs in rank order"


def rank_order_sums(chunks: Sequence[torch.Tensor],
                    bf16_toward_zero: bool = False) -> list[torch.Tensor]:
    """What every reduce-scatter and all-reduce kernel computes: the fp32 sum of ``chunks``
    in rank order, rounded once to their dtype (to nearest even, as the GPU and torch
    round). ``bf16_toward_zero`` also accepts bf16 rounded toward zero (Triton 3.9's
    interpreter casts fp32 to bf16 by dropping the low bits)."""
    acc = torch.zeros(chunks[0].shape, dtype=torch.float32)
    for c in chunks:
        acc += c.float()
    sums = [acc.to(chunks[0].dtype)]
    if bf16_toward_zero and chunks[0].dtype == torch.bfloat16:
        sums.append((acc.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16))
    return sums


def check_reduce_scatter(label: str, xs: Sequence[torch.Tensor], outs: Sequence[torch.Tensor],
                         bf16_toward_zero: bool = False) -> None:
    """Rank ``r``'s output is bitwise the fp32 rank-order sum of the inputs' chunk ``r``
    (so whichever rank holds a chunk, it is the same), and all of them together are close
    to the float64 sum. ``xs[r]`` is rank r's input of ``world`` chunks."""
    world, n = len(xs), outs[0].numel()
    outs = [o.cpu() for o in outs]
    for r in range(world):
        sums = rank_order_sums([x.view(world, n)[r] for x in xs], bf16_toward_zero)
        assert any(torch.equal(bits(outs[r]), bits(s)) for s in sums), \
            f"{label}: rank {r} is not the fp32 rank-order sum of its chunk"
    ref = sum(x.double() for x in xs).view(world, n)
    tol = 1e-5 if outs[0].dtype == torch.float32 else 2e-2
    err = (torch.stack(outs).double() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err < tol, f"{label}: relative error {err:.3g}"


# the scatter kernels' relative error against float64: fp32 sums, rounded to the dtype
SCATTER_TOL = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def finite_error(got: torch.Tensor, ref: torch.Tensor, label: object = "") -> float:
    """The relative error of ``got`` against float64 ``ref`` over ``ref``'s finite
    elements, after asserting that ``got`` has NaN exactly where ``ref`` has and the same
    infinities."""
    got = got.double()
    fin, inf = ref.isfinite(), ref.isinf()
    assert got.isnan().equal(ref.isnan()) and got[inf].equal(ref[inf]), label
    return float((got[fin] - ref[fin]).norm() / ref[fin].norm())
