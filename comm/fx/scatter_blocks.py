"""Triton kernels for accumulating scatters that each block of value rows plans for
itself, behind ``commrt::partitioned_index_put`` on CUDA (``block_sums`` rows).

Two launches, as Inductor's plain scatter has, no plan and no copies:

1. ``_copy``: the output := ``self``.
2. ``_block_sums``: a program takes ``R`` value rows and compares their indices (before
   waiting for ``_copy``, on sm90+ its programmatic dependent). Where at most ``LEADERS``
   distinct indices occur among them (contended indices: few rows, or one hot row), it
   sums the rows that share an index (a 0/1 matrix times the rows on tensor cores, exact:
   ``scatter_kernels._add_exact``) and adds one row per distinct index; else it adds
   every row (uniform indices, as Inductor's scatter does). The adds are atomics in the
   output's dtype; an infinity or NaN is left out of the product (0 * inf is NaN) and
   added by its own row. An index out of range poisons the output with NaN (the plain op
   raises a device-side assert).
"""

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl
from commrt.symm_mem.launch import cdiv, next_pow2

from .scatter_kernels import PARTS, _add_exact, _rows_of, poison, scatter_shape

COPY_BLOCK = 4096  # elements a _copy program copies


@triton.jit
def _copy(src, dst, plane, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # _block_sums' programs may start (they compare their indices, then wait)
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < plane
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _block_sums(out, idx, vals, n, rows, D: tl.constexpr, R: tl.constexpr,
                BD: tl.constexpr, LEADERS: tl.constexpr, PARTS: tl.constexpr,
                WIDE: tl.constexpr, PDL: tl.constexpr):
    # R value rows a program, BD columns a step; offsets int32 unless an operand holds
    # 2**31 elements or more (WIDE)
    pid = tl.program_id(0)
    j = tl.arange(0, R)
    r = pid * R + j
    if WIDE:
        r = r.to(tl.int64)
    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
    # same[a, b]: rows a and b add to one output row; first: the first row of each
    same = (i[:, None] == i[None, :]) & ok[:, None] & ok[None, :]
    first = ok & (tl.max((same & (j[None, :] < j[:, None])).to(tl.int32), axis=1) == 0)
    combine = tl.sum(first.to(tl.int32)) <= LEADERS
    if PDL:
        tl.extra.cuda.gdc_wait()
    if tl.max(bad.to(tl.int32)) > 0:
        poison(out, rows * D)
    dst = out + i * D
    for c0 in range(0, D, BD):
        c = c0 + tl.arange(0, BD)
        cm = c < D
        vn = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < n)[:, None] & cm[None, :],
                     other=0)
        if combine:
            v = vn.to(tl.float32)
            fin = tl.abs(v) < float("inf")
            s = _add_exact(tl.zeros([R, BD], tl.float32), tl.where(same, 1.0, 0.0),
                           tl.where(fin, v, 0.0), PARTS)
            tl.atomic_add(dst[:, None] + c[None, :], s.to(out.dtype.element_ty),
                          mask=first[:, None] & cm[None, :], sem="relaxed")
            tl.atomic_add(dst[:, None] + c[None, :], vn,
                          mask=ok[:, None] & cm[None, :] & (fin == 0), sem="relaxed")
        else:
            tl.atomic_add(dst[:, None] + c[None, :], vn, mask=ok[:, None] & cm[None, :],
                          sem="relaxed")


def block_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                    rows_per_block: int = 64, leaders: int | None = None, warps: int = 4,
                    pdl: bool = True) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) with the scheme above.

    ``self`` and ``values`` contiguous, of one dtype of ``PARTS``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``rows_per_block``: value rows a program (a power of
    two, at least 16); ``leaders``: the most distinct indices among them for which it sums
    rows first (None: three quarters of them); ``warps``: of a ``_block_sums`` program;
    ``pdl``: launch ``_block_sums`` as a programmatic dependent of ``_copy`` where the GPU
    has it.
    """
    rows, n, D = scatter_shape(self, index, values, 1, tuple(PARTS), "block_index_add")
    if values.dtype != self.dtype:
        raise TypeError(f"block_index_add adds values into an output of their dtype, got "
                        f"{values.dtype} into {self.dtype}")
    R = rows_per_block
    if R < 16 or R & (R - 1):
        raise ValueError(f"block_index_add: rows_per_block={R} must be a power of two of at "
                         "least 16")
    leaders = 3 * R // 4 if leaders is None else leaders
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        return out
    pdl = pdl and has_pdl(self.device)
    _copy[(cdiv(plane, COPY_BLOCK),)](self, out, plane, BLOCK=COPY_BLOCK, PDL=pdl)
    if n * D:
        _block_sums[(cdiv(n, R),)](out, index, values, n, rows, D=D, R=R,
                                   BD=max(16, min(128, next_pow2(D))), LEADERS=leaders,
                                   PARTS=PARTS[values.dtype], WIDE=max(n, rows) * D >= 1 << 31,
                                   PDL=pdl, num_warps=warps,
                                   **({"launch_pdl": True} if pdl else {}))
    return out
