"""Triton kernels for accumulating scatters of narrow rows into few output rows
(``scatter_rule.few_rows``: histograms, class counts, per-bucket sums) behind
``commrt::partitioned_index_put`` on CUDA.

Every output row is hot there: no plan, no copies, no atomics. Two launches,
deterministic:

1. ``_partial``: program ``g`` sums the values of its share of the indices into each
   output row (selects into ``[rows, block, columns]`` accumulators, the next block loaded
   while one is summed) and stores the ``[rows, columns]`` sums as its partial. An index
   out of range makes its partial NaN (the plain op raises a device-side assert).
   int32/int64 values (``scatter_rule.few_ints``) are summed in their own dtype, wrapping
   as the plain op's atomics do (so exactly); an index out of range there is a
   device-side assert (Triton's debug is on for their partials). Rows
   wider than ``FEW_WIDTH`` (``scatter_rule.few_products``), and fp16/bf16 rows of
   ``scatter_rule.few_half_products``: the same partial as one-hot products on tensor
   cores, in tf32 parts (``scatter_kernels.PARTS``) or (fp16/bf16 on a GPU) in the values'
   dtype (each product exact); their fp32 sums are not correctly rounded: errors a few
   times the selects'.
2. ``_total``: output := ``self`` + the ``G`` partials, in the output's dtype, over a grid
   of ``TOTAL_BLOCK`` output elements a program; on sm90+ a programmatic dependent of
   ``_partial``.
"""

import functools

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl, sm_count
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_kernels import (
    INTERPRETER_SMS,
    PARTS,
    _add_in_parts,
    _rows_of,
    _wrapped,
    scatter_shape,
)
from .scatter_rule import (
    FEW_PRODUCTS_MAX_ROW,
    FEW_ROWS,
    FEW_WIDTH,
    INT_DTYPES,
    few_half_products,
)

# Launch shape of the selects, from benchmarks/results/probe_few_total_NVIDIA_H200.json
# (9c6b31d; "prefetch 4096" on 4 warps, 4 programs an SM): within 4% of the fastest
# partials measured on rows of 4 and 16 and 1-D values into 8 rows, and one program of
# _total took 13 µs of the 30 on rows of 16 (a grid of 8-element blocks: 2.1). Then
# (probe_few_launch_NVIDIA_H200.json, 3a619f3), µs a call, 4,096 accumulator elements
# against 8,192: fp32 rows of 16 into 8 rows 10.5 against 9.6, rows of 4 10.4 against
# 10.1 (into 16 rows 17.8 against 14.1), 1-D values 18.3 against 18.9, bf16 rows of 16
# 10.1 against 11.5; 8 programs an SM 1.1-2.8 slower; _total as a programmatic dependent
# 0.5-0.7 faster.
PROGRAMS_PER_SM = 4  # _partial programs an SM
WARPS = 4  # a _partial program's
TILE = 4096  # accumulator elements of a _partial program ([rows, indices, columns])
FP32_TILE = 8192  # ... for fp32 rows of FP32_TILE_ROW elements or more
FP32_TILE_ROW = 4
TOTAL_BLOCK, TOTAL_TILE = 8, 8192  # _total's output elements a program, partials' a step
# The products (rows wider than FEW_WIDTH, scatter_rule.few_products, and fp16/bf16 rows
# of scatter_rule.few_half_products): value bytes a step an SM, and programs an SM for rows
# of up to DOT_NARROW columns (DOT_NARROW_PROGRAMS) and wider (DOT_PROGRAMS); fp16/bf16
# products in the values' dtype on a GPU (HALF_PRODUCTS), else in tf32. On one H200, 4M
# values into 8 rows, uniform, µs (benchmarks/results/probe_few_products_NVIDIA_H200.json,
# c3e3124): 16 KB a step on 1 program an SM for rows of 100, fp32 8.7 against 9.9 on 8 KB
# and 2 (the shape before) and 9.2 on 32 KB, bf16 in bf16 6.1 against 6.8 in tf32; on 4
# programs for bf16 and fp16 rows of 16, 7.0 against 7.9 on 8 KB and 9.0 on 1 program
# (their selects 10.1 and 9.9); Inductor's partitions 10.7, 8.3 and 11.8. num_stages 2 or
# 4 no faster. The fp32 sums of the products on tensor cores are not correctly rounded:
# fp32 rows of 100 7.2e-7 against 4.1e-7 on 2 programs an SM (Inductor's plain scatter
# 1.3e-6 in the grid). With fp32 in two tf32 parts (probe_few_products_parts_NVIDIA_H200.json,
# 8400188) the shape stayed the fastest: rows of 100 8.13 µs against 8.34-10.71 on the
# other steps and programs, 8.71 on 8 warps, 9.04 and 10.19 with num_stages 4 and 2; fp32
# rows of 16 as two-part products took 12.9-20.6 against 9.6 for the selects.
DOT_SM_BYTES = 16384
DOT_NARROW, DOT_NARROW_PROGRAMS, DOT_PROGRAMS = 16, 4, 1
DOT_STAGES = None  # Triton's num_stages for the products (None: its default)
HALF_PRODUCTS = True


@triton.jit
def _block(idx, vals, start, hi, rows, c, cm, D: tl.constexpr, SUB: tl.constexpr,
           WIDE: tl.constexpr, KEEP: tl.constexpr = False):
    """(values in fp32, or their own dtype where KEEP, their output rows, in range, out of
    range) of the SUB value rows from ``start`` (before ``hi``)."""
    r = start + tl.arange(0, SUB)
    v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < hi)[:, None] & cm[None, :],
                other=0)
    if not KEEP:
        v = v.to(tl.float32)
    i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
    return v, i, ok, bad


@triton.jit
def _products(idx, vals, lo, hi, rows, D: tl.constexpr, R: tl.constexpr, DP: tl.constexpr,
              SUB: tl.constexpr, WIDE: tl.constexpr, PARTS: tl.constexpr,
              HALF: tl.constexpr = False):
    """([R, DP] sums of the values lo..hi into each output row, any index out of range), a
    block at a time as one-hot products (tl.dot: R, SUB and DP at least 16), the values in
    PARTS tf32 parts (scatter_kernels' _add_in_parts); HALF (fp16/bf16 values): in their own
    dtype, one product (exact: a one-hot row times a value)."""
    c = tl.arange(0, DP)
    cm = c < D
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    bad_any = tl.zeros([SUB], tl.int32)
    for start in range(lo, hi, SUB):
        v, i, ok, bad = _block(idx, vals, start, hi, rows, c, cm, D, SUB, WIDE, HALF)
        bad_any |= bad.to(tl.int32)
        onehot = tl.where((rr[:, None] == i[None, :]) & ok[None, :], 1.0, 0.0)
        if HALF:
            acc = tl.dot(onehot.to(v.dtype), v, acc)
        else:
            acc = _add_in_parts(acc, onehot, v, PARTS)
    return acc, tl.max(bad_any) > 0


@triton.jit
def _selects(idx, vals, lo, hi, rows, D: tl.constexpr, R: tl.constexpr, DP: tl.constexpr,
             SUB: tl.constexpr, INT: tl.constexpr = False):
    """([R, DP] sums of the values lo..hi into each output row, any index out of range):
    ``acc[k] += where(index == k, values, 0)`` over [R, SUB, DP], the next SUB value rows
    loaded before a block is summed; one reduction at the end. In fp32, or (INT) in the
    values' integer dtype: wrapping as the plain op's atomics do, so exact."""
    k = tl.arange(0, R)[:, None, None]
    c = tl.arange(0, DP)[None, None, :]
    s = tl.arange(0, SUB)[None, :, None]
    cm = c < D
    acc = tl.zeros([R, SUB, DP], vals.dtype.element_ty if INT else tl.float32)
    bad_any = tl.zeros([1, SUB, 1], tl.int32)
    r = lo + s
    v = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
    i = tl.load(idx + r, mask=r < hi, other=0)
    for start in range(lo, hi, SUB):
        rm = start + s < hi
        r = start + SUB + s
        v_next = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
        i_next = tl.load(idx + r, mask=r < hi, other=0)
        i, bad = _wrapped(i, rm, rows)
        bad_any |= bad.to(tl.int32)
        acc += tl.where(i == k, v.to(acc.dtype), 0)
        v, i = v_next, i_next
    return tl.sum(acc, axis=1), tl.max(bad_any) > 0


@triton.jit
def _store_partial(part, acc, bad, g, rows, D: tl.constexpr, R: tl.constexpr,
                   DP: tl.constexpr, INT: tl.constexpr = False):
    if INT:  # no NaN to poison with: a device-side assert, as the plain op's
        tl.device_assert(bad == 0, "index out of range in a commrt scatter")
    elif bad:  # poison: the sum of every partial is NaN
        acc = tl.full([R, DP], float("nan"), tl.float32)
    c = tl.arange(0, DP)
    rr = tl.arange(0, R)
    tl.store(part + (g * rows + rr[:, None]) * D + c[None, :], acc,
             mask=(rr < rows)[:, None] & (c < D)[None, :])


@triton.jit
def _partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
             DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr,
             PARTS: tl.constexpr = 0, PDL: tl.constexpr = False, HALF: tl.constexpr = False,
             INT: tl.constexpr = False):
    # PARTS = 0: _selects (SUB value rows a step; INT: integers, summed in their dtype, an
    # index out of range a device-side assert); PARTS > 0: _products (HALF: in the
    # values' fp16/bf16). An infinity or a NaN among the values makes its column NaN in
    # every row of a product (0 * inf); where acc is not finite, and no index was out of
    # range, the chunk is summed again a row at a time. The values are not checked in the
    # loop: element-wise flags there cost more than the products
    # (docs/decisions/2026-11-29-scatter-rows-65-128-into-few.md).
    if PDL:  # _total's programs may start (they wait for this grid to finish)
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    if PARTS > 0:
        acc, bad = _products(idx, vals, lo, hi, rows, D, R, DP, SUB, WIDE, PARTS, HALF)
        if (tl.max((tl.abs(acc) == float("inf")) | (acc != acc)) > 0) & (bad == 0):
            acc = _row_sums(idx, vals, lo, hi, rows, D, R, DP, SUB, WIDE)
    else:
        acc, bad = _selects(idx, vals, lo, hi, rows, D, R, DP, SUB, INT)
    _store_partial(part, acc, bad, g, rows, D, R, DP, INT)


@triton.jit
def _row_sums(idx, vals, lo, hi, rows, D: tl.constexpr, R: tl.constexpr, DP: tl.constexpr,
              SUB: tl.constexpr, WIDE: tl.constexpr):
    """[R, DP] sums of the values lo..hi into each output row, one row at a time (the
    products' rare way out, in few registers)."""
    c = tl.arange(0, DP)
    cm = c < D
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    for k in range(0, rows):
        s = tl.zeros([SUB, DP], tl.float32)
        for start in range(lo, hi, SUB):
            v, i, ok, bad = _block(idx, vals, start, hi, rows, c, cm, D, SUB, WIDE)
            s += tl.where((ok & (i == k))[:, None], v, 0.0)
        acc = tl.where(rr[:, None] == k, tl.sum(s, axis=0)[None, :], acc)
    return acc


@triton.jit
def _total(self_ptr, part, out, G, plane, PB: tl.constexpr, GB: tl.constexpr,
           PDL: tl.constexpr = False):
    # out[a block of PB] := self + the G partials there, GB partials a step; PDL: a
    # programmatic dependent of the partials' grid
    if PDL:
        tl.extra.cuda.gdc_wait()
    offs = tl.program_id(0) * PB + tl.arange(0, PB)
    m = offs < plane
    s = tl.zeros([GB, PB], part.dtype.element_ty)  # fp32, or the integers' dtype
    for g0 in range(0, G, GB):
        g = g0 + tl.arange(0, GB)
        s += tl.load(part + g[:, None] * plane + offs[None, :],
                     mask=(g < G)[:, None] & m[None, :], other=0)
    x = tl.sum(s, axis=0) + tl.load(self_ptr + offs, mask=m, other=0).to(s.dtype)
    tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)


DTYPES = (*PARTS, *INT_DTYPES)  # integers: the selects in their own dtype


# the launches, without Triton's per-call argument binding (symm_mem.launch); the
# integers' partials with Triton's debug on, which keeps their device-side assert (and
# without its overflow checks: the sums wrap as the plain op's atomics do)
run_partial, run_total = Launcher(_partial), Launcher(_total)
run_int_partial = Launcher(_partial, debug=True, sanitize_overflow=False)


def few_rows_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                       pdl: bool = True, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) for at most ``FEW_ROWS`` rows of
    at most ``FEW_WIDTH`` elements (selects; integers too), or of up to
    ``FEW_PRODUCTS_MAX_ROW`` floating elements (products).

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``pdl``: launch ``_total`` as a programmatic
    dependent of ``_partial`` where the GPU has it; ``replay``: a list that receives this
    call's replay (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, 1, DTYPES, "few_rows_index_add")
    widest = FEW_WIDTH if values.dtype in INT_DTYPES else FEW_PRODUCTS_MAX_ROW
    if rows > FEW_ROWS or D > widest:
        raise ValueError(f"few_rows_index_add takes at most {FEW_ROWS} rows of at most "
                         f"{widest} {values.dtype} elements, got {rows} rows of {D}")
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        return out
    G, partial, total = _launches(rows, n, D, values.dtype,
                                  sm_count(self.device) or INTERPRETER_SMS,
                                  pdl and has_pdl(self.device), self.device.type == "cuda")
    part = torch.empty(max(1, G * plane), device=self.device, dtype=_part_dtype(values))
    chunk = cdiv(n, G) if G else 0
    if partial is not None:
        partial(index, values, part, n, rows, chunk)
    total(self, part, out, G, plane)
    if replay is not None:
        go = replay_call((partial, (index, values, part, n, rows, chunk)),
                         (total, (self, part, out, G, plane)))
        if go is not None:
            replay.append(_replay(go, n, rows, chunk, G, plane))
    return out


def _replay(go, n: int, rows: int, chunk: int, G: int, plane: int):
    """``few_rows_index_add`` of one shape again (see ``replay``)."""
    partial, total = go
    part_n = max(1, G * plane)

    def again(self, index, values):
        out = torch.empty_like(self)
        part = torch.empty(part_n, device=self.device, dtype=_part_dtype(values))
        if partial is not None:
            partial(index, values, part, n, rows, chunk)
        total(self, part, out, G, plane)
        return out

    return again


def _part_dtype(values: torch.Tensor) -> torch.dtype:
    """The partials' dtype: the integers' own, else fp32."""
    return values.dtype if values.dtype in INT_DTYPES else torch.float32


@functools.lru_cache(maxsize=1024)
def _launches(rows: int, n: int, D: int, dtype: torch.dtype, sms: int, pdl: bool,
              gpu: bool) -> tuple:
    """``few_rows_index_add``'s programs ``G`` and launches for one shape (``sms``: the
    GPU's; ``pdl``: asked for and on a GPU that has it; ``gpu``: not Triton's interpreter,
    whose bf16 products are wrong, Triton 3.8), each ``Launcher.prepare``'d (``_partial``
    None where there are no values). Cached: a call of a shape seen before computes none
    of it."""
    plane = rows * D
    half = gpu and HALF_PRODUCTS and few_half_products(D, dtype)
    dot = D > FEW_WIDTH or half
    if dot:  # tl.dot's operands: at least 16 a side
        R, DP = max(16, next_pow2(rows)), max(16, next_pow2(D))
        per_sm = DOT_NARROW_PROGRAMS if DP <= DOT_NARROW else DOT_PROGRAMS
        sub = max(16, DOT_SM_BYTES // (per_sm * DP * dtype.itemsize))
    else:
        R, DP = next_pow2(rows), next_pow2(D)
        tile = FP32_TILE if dtype in (torch.float32, torch.int32) and D >= FP32_TILE_ROW \
            else TILE
        sub, per_sm = max(1, tile // (R * DP)), PROGRAMS_PER_SM
    G = min(per_sm * sms, cdiv(n, sub))
    pdl = pdl and G > 0
    partial = None
    if G:
        whole = dtype in INT_DTYPES
        partial = (run_int_partial if whole else run_partial).prepare(
            (G,), WARPS, False, DOT_STAGES if dot else None, D=D, R=R, DP=DP, SUB=sub,
            WIDE=n * D >= 1 << 31, PARTS=PARTS[dtype] if dot else 0, PDL=pdl, HALF=half,
            INT=whole)
    pb = min(next_pow2(plane), TOTAL_BLOCK)
    gb = max(1, min(next_pow2(G), TOTAL_TILE // pb))
    total = run_total.prepare((cdiv(plane, pb),), 4, pdl, PB=pb, GB=gb, PDL=pdl)
    return G, partial, total
