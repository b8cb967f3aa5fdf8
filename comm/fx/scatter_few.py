"""Triton kernels for accumulating scatters of narrow rows into few output rows
(``scatter_rule.few_rows``: histograms, class counts, per-bucket sums) behind
``commrt::partitioned_index_put`` on CUDA.

Every output row is hot there: no plan, no copies, no atomics. Two launches,
deterministic:

1. ``_partial``: program ``g`` sums the values of its share of the indices into each
   output row (compares and adds, a block at a time, in registers across its share) and
   stores the ``[rows, columns]`` sums as its partial. An index out of range makes its
   partial NaN (the plain op raises a device-side assert).
2. ``_total``: output := ``self`` + the ``G`` partials, in the output's dtype.
"""

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import sm_count
from commrt.symm_mem.launch import cdiv, next_pow2

from .scatter_kernels import PARTS, _rows_of, scatter_shape
from .scatter_rule import FEW_ROWS, FEW_WIDTH

# Launch shape, from an A/B on one H200 (docs/decisions.md, 2026-11-25): of 1-8 warps and
# 2-16 programs an SM, 4 and 4 were within 11% of the fastest on rows of 4 and 1-D values
# into 8 rows.
INTERPRETER_SMS = 8  # SMs assumed under the interpreter
PROGRAMS_PER_SM = 4  # _partial programs an SM
WARPS = 4  # a _partial program's
TILE = 2048  # values a _partial step loads ([indices, columns])
TOTAL_TILE = 4096  # partials a _total step loads


@triton.jit
def _partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
             DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr):
    g = tl.program_id(0)
    c = tl.arange(0, DP)
    cm = c < D
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    bad_any = tl.zeros([SUB], tl.int32)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < hi)[:, None] & cm[None, :],
                    other=0).to(tl.float32)
        i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
        bad_any |= bad.to(tl.int32)
        for k in tl.static_range(R):  # acc[k] += the rows of this block that hit row k
            s = tl.sum(tl.where((ok & (i == k))[:, None], v, 0.0), axis=0)
            acc += tl.where(rr[:, None] == k, s[None, :], 0.0)
    if tl.max(bad_any) > 0:  # poison: the sum of every partial is NaN
        acc = tl.full([R, DP], float("nan"), tl.float32)
    tl.store(part + (g * rows + rr[:, None]) * D + c[None, :], acc,
             mask=(rr < rows)[:, None] & cm[None, :])


@triton.jit
def _total(self_ptr, part, out, G, plane, PB: tl.constexpr, GB: tl.constexpr):
    offs = tl.program_id(0) * PB + tl.arange(0, PB)
    m = offs < plane
    s = tl.zeros([GB, PB], tl.float32)
    for g0 in range(0, G, GB):
        g = g0 + tl.arange(0, GB)
        s += tl.load(part + g[:, None] * plane + offs[None, :],
                     mask=(g < G)[:, None] & m[None, :], other=0)
    x = tl.sum(s, axis=0) + tl.load(self_ptr + offs, mask=m, other=0).to(tl.float32)
    tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)


DTYPES = tuple(PARTS)


def few_rows_index_add(self: torch.Tensor, index: torch.Tensor,
                       values: torch.Tensor) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) for at most ``FEW_ROWS`` rows of
    at most ``FEW_WIDTH`` elements.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``.
    """
    rows, n, D = scatter_shape(self, index, values, 1, DTYPES, "few_rows_index_add")
    if rows > FEW_ROWS or D > FEW_WIDTH:
        raise ValueError(f"few_rows_index_add takes at most {FEW_ROWS} rows of at most "
                         f"{FEW_WIDTH} elements, got {rows} rows of {D}")
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        return out
    DP = next_pow2(D)
    sub = TILE // DP
    programs = PROGRAMS_PER_SM * (sm_count(self.device) or INTERPRETER_SMS)
    G = min(programs, cdiv(n, sub))
    part = torch.empty(max(1, G * plane), device=self.device, dtype=torch.float32)
    if G:
        _partial[(G,)](index, values, part, n, rows, cdiv(n, G), D=D, R=next_pow2(rows),
                       DP=DP, SUB=sub, WIDE=n * D >= 1 << 31, num_warps=WARPS)
    pb = next_pow2(plane)  # at most FEW_ROWS * FEW_WIDTH
    _total[(1,)](self, part, out, G, plane, PB=pb, GB=max(1, min(next_pow2(G), TOTAL_TILE // pb)),
                 num_warps=4)
    return out
