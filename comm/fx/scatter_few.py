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

from commrt.dispatch.profile import has_pdl, sm_count
from commrt.symm_mem.launch import cdiv, next_pow2

from .scatter_kernels import PARTS, _add_exact, _rows_of, scatter_shape
from .scatter_rule import FEW_DOT_WIDTH, FEW_ROWS, FEW_WIDTH

# Launch shape, from an A/B on one H200 (docs/decisions.md, 2026-11-25): of 1-8 warps and
# 2-16 programs an SM, 4 and 4 were within 11% of the fastest on rows of 4 and 1-D values
# into 8 rows.
INTERPRETER_SMS = 8  # SMs assumed under the interpreter
PROGRAMS_PER_SM = 4  # _partial programs an SM
WARPS = 4  # a _partial program's
TILE = 2048  # values a _partial step loads ([indices, columns])
TOTAL_TILE = 4096  # partials a _total step loads
TOTAL_BLOCK = 64  # output elements a _total program sums
# Rows wider than FEW_WIDTH (_dot_partial)
DOT_TILE = 4096
DOT_PROGRAMS_PER_SM = 2
DOT_TOTAL_TILE = 8192


@triton.jit
def _compare_sums(idx, vals, lo, hi, rows, D: tl.constexpr, R: tl.constexpr,
                  DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr):
    """([R, DP] sums of the values lo..hi into each output row, any index out of range):
    compares and adds, a block at a time."""
    c = tl.arange(0, DP)
    cm = c < D
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    bad_any = tl.zeros([SUB], tl.int32)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < hi)[:, None] & cm[None, :],
                    other=0).to(tl.float32)
        i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
        bad_any |= bad.to(tl.int32)
        for k in tl.static_range(R):  # acc[k] += the rows of this block that hit row k
            s = tl.sum(tl.where((ok & (i == k))[:, None], v, 0.0), axis=0)
            acc += tl.where(rr[:, None] == k, s[None, :], 0.0)
    return acc, tl.max(bad_any) > 0


@triton.jit
def _store_partial(part, acc, bad, g, rows, D: tl.constexpr, R: tl.constexpr,
                   DP: tl.constexpr):
    if bad:  # poison: the sum of every partial is NaN
        acc = tl.full([R, DP], float("nan"), tl.float32)
    c = tl.arange(0, DP)
    rr = tl.arange(0, R)
    tl.store(part + (g * rows + rr[:, None]) * D + c[None, :], acc,
             mask=(rr < rows)[:, None] & (c < D)[None, :])


@triton.jit
def _partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
             DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr,
             PDL: tl.constexpr = False):
    if PDL:  # _total may launch; it waits for every partial
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    acc, bad = _compare_sums(idx, vals, lo, hi, rows, D, R, DP, SUB, WIDE)
    _store_partial(part, acc, bad, g, rows, D, R, DP)


@triton.jit
def _dot_partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
                 DP: tl.constexpr, SUB: tl.constexpr, PARTS: tl.constexpr,
                 WIDE: tl.constexpr, PDL: tl.constexpr = False):
    # Rows wider than FEW_WIDTH: acc += onehot @ values a block at a time (R >= 16 output
    # rows, SUB >= 16 indices, DP >= 16 columns, for tl.dot), exact (scatter_kernels'
    # _add_exact: tf32 parts); where the chunk holds an infinity, a NaN or an index out of
    # range (0 * inf would reach every row), it is summed again by compares.
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    c = tl.arange(0, DP)
    cm = c < D
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    odd = tl.zeros([SUB], tl.int32)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < hi)[:, None] & cm[None, :],
                    other=0).to(tl.float32)
        i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
        fin = tl.abs(v) < float("inf")
        odd |= bad.to(tl.int32) | tl.max((fin == 0).to(tl.int32), axis=1)
        onehot = tl.where((rr[:, None] == i[None, :]) & ok[None, :], 1.0, 0.0)
        acc = _add_exact(acc, onehot, tl.where(fin, v, 0.0), PARTS)
    bad = False
    if tl.max(odd) > 0:
        acc, bad = _compare_sums(idx, vals, lo, hi, rows, D, R, DP, SUB, WIDE)
    _store_partial(part, acc, bad, g, rows, D, R, DP)


@triton.jit
def _total(self_ptr, part, out, G, plane, PB: tl.constexpr, GB: tl.constexpr,
           PDL: tl.constexpr = False):
    # out[PB block] := self + the G partials there (GB partials a step)
    if PDL:
        tl.extra.cuda.gdc_wait()
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


def few_rows_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                       programs_per_sm: int | None = None, tile: int | None = None,
                       pdl: bool | None = None, dot: bool | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) for at most ``FEW_ROWS`` rows of
    at most ``FEW_DOT_WIDTH`` elements (over ``FEW_WIDTH``: ``_dot_partial``).

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``. ``programs_per_sm``, ``tile`` (value elements a
    step), ``pdl`` (``_total`` a programmatic dependent) and ``dot`` (``_dot_partial``)
    override the launch shape.
    """
    rows, n, D = scatter_shape(self, index, values, 1, DTYPES, "few_rows_index_add")
    if rows > FEW_ROWS or D > FEW_DOT_WIDTH:
        raise ValueError(f"few_rows_index_add takes at most {FEW_ROWS} rows of at most "
                         f"{FEW_DOT_WIDTH} elements, got {rows} rows of {D}")
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        return out
    dot = D > FEW_WIDTH if dot is None else dot
    DP = next_pow2(D) if not dot else max(16, next_pow2(D))
    sub = (tile or (DOT_TILE if dot else TILE)) // DP
    sub = max(16, sub) if dot else max(1, sub)
    per_sm = programs_per_sm or (DOT_PROGRAMS_PER_SM if dot else PROGRAMS_PER_SM)
    G = min(per_sm * (sm_count(self.device) or INTERPRETER_SMS), cdiv(n, sub))
    part = torch.empty(max(1, G * plane), device=self.device, dtype=torch.float32)
    pdl = has_pdl(self.device) if pdl is None else pdl and has_pdl(self.device)
    pdl = pdl and G > 0
    launch = {"launch_pdl": True} if pdl else {}
    if G:
        args = (index, values, part, n, rows, cdiv(n, G))
        meta = dict(D=D, R=max(16, next_pow2(rows)) if dot else next_pow2(rows), DP=DP,
                    SUB=sub, WIDE=n * D >= 1 << 31, PDL=pdl, num_warps=WARPS)
        if dot:
            _dot_partial[(G,)](*args, PARTS=PARTS[values.dtype], **meta)
        else:
            _partial[(G,)](*args, **meta)
    pb = min(next_pow2(plane), TOTAL_BLOCK)  # ... at most FEW_ROWS * FEW_WIDTH elements
    gb = max(1, min(next_pow2(G), (DOT_TOTAL_TILE if dot else TOTAL_TILE) // pb))
    _total[(cdiv(plane, pb),)](self, part, out, G, plane, PB=pb, GB=gb, PDL=pdl, num_warps=4,
                               **launch)
    return out
