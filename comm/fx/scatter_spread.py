"""Triton kernels for an accumulating scatter spread over a fixed number of fp32 copies
(``scatter_rule.spread``: narrow fp32 rows with many values a row, where copies always
pay, and fp16/bf16 rows of 4 that Inductor would not partition) behind
``commrt::partitioned_index_put`` on CUDA.

The scheme of Inductor's partitioned scatter (value ``j`` to copy ``j % P``), with its
launch shape fixed instead of autotuned (Inductor's autotuner picks one of two configs by
timings about ten times the kernel's, so that its speed changes from one compile to the
next: docs/decisions/2026-11-28-scatter-two-speeds-inductor-partitioned-graph.md), no launch
to zero the copies, a block's hot rows summed first, and an index out of range caught. Two
launches, no plan, no host sync:

1. ``_spread``: a program takes a block of ``R`` value rows. The rows at ``HOT`` evenly
   spaced places of the block are candidates; the block's rows that hit a candidate, where
   ``HOT_MIN`` or more do, are summed and added once, to copy ``program % P``; every other
   row is added with atomics to copy ``j % P``. With ``BUSY`` (``warp_sums``), a block
   where ``BUSY`` to ``HOT_MIN - 1`` rows hit a candidate (a few rows take most) adds its
   other rows to copy ``program % P`` instead, each warp's values of one row summed before
   one atomic. The copies are ``scatter_scratch``'s, zero on entry. An index out of range
   sets a flag that follows the copies.
2. ``_spread_sum``: output := ``self`` + the ``P`` copies, in the output's dtype, leaving
   the copies zero; NaN everywhere where the flag is set (the plain op raises a
   device-side assert). The last program to finish clears the flag. On sm90+ a
   programmatic dependent of ``_spread``.
"""

import functools

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl, has_warp_sums
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_kernels import PARTS, SUM_PROGRAMS, _copies, _rows_of, scatter_shape
from .scatter_scratch import zeroed
from .warp_sums import warp_add

# _spread's blocks: value elements a block (whole rows), warps. On one H100 (fp32 rows of 4
# into 1,024 rows, uniform) blocks of 1,024 on 4 warps ran 19.4 µs, element-wise blocks as
# Inductor's kernel 19.7 (benchmarks/results/probe_spread_NVIDIA_H100_80GB_HBM3.json,
# 93b0b4a); blocks of 2,048 and 4,096 on 4 or 8 warps were no better
# (probe_spread_blocks_NVIDIA_H100_80GB_HBM3.json, b208be1).
BLOCK, WARPS = 1024, 4
SUM_COPIES, SUM_TILE = 128, 8192  # _spread_sum: copies a step, and elements a step
DTYPES = tuple(PARTS)


@triton.jit
def _spread(extra, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
            R: tl.constexpr, P: tl.constexpr, HOT: tl.constexpr, HOT_MIN: tl.constexpr,
            WIDE: tl.constexpr, PDL: tl.constexpr, BUSY: tl.constexpr = 0):
    # [R, DP] blocks of R value rows; HOT > 0: the rows at HOT evenly spaced places of the
    # block are candidates, and a candidate that HOT_MIN or more of the block's rows hit
    # has their sum added once (to copy pid % P); BUSY > 0: where BUSY to HOT_MIN - 1 of
    # them hit a candidate, the rest go to copy pid % P through warp_sums; the flag at
    # extra + P * plane (fp32)
    if PDL:  # _spread_sum's programs may start (they wait for this grid to finish)
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    r = pid * R + tl.arange(0, R)
    c = tl.arange(0, DP)
    cm = c < D
    v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < n)[:, None] & cm[None, :],
                other=0).to(tl.float32)
    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
    plain = ok
    busy = 0
    for k in tl.static_range(HOT):
        at = pid * R + k * (R // HOT)
        h = tl.load(idx + at, mask=at < n, other=-1)
        h = tl.where(h < -rows, -1, tl.where(h < 0, h + rows, h))
        hit = plain & (i == h)
        hits = tl.sum(hit.to(tl.int32))
        if BUSY > 0:
            busy += ((hits >= BUSY) & (hits < HOT_MIN)).to(tl.int32)
        if hits >= HOT_MIN:
            s = tl.sum(tl.where(hit[:, None], v, 0.0), axis=0)
            tl.atomic_add(extra + (pid & (P - 1)) * plane + h * D + c, s, mask=cm,
                          sem="relaxed")
            plain = plain & (hit == 0)
    if BUSY > 0:
        if busy > 0:
            _warp_rows(extra + (pid & (P - 1)) * plane, vals, r, i, plain, v, D, DP)
        else:
            _plain_rows(extra, r, i, plain, v, c, cm, plane, D, P)
    else:
        _plain_rows(extra, r, i, plain, v, c, cm, plane, D, P)
    tl.store(extra + tl.full([], P, tl.int64) * plane + 0 * r, 1.0, mask=bad)


@triton.jit
def _plain_rows(extra, r, i, plain, v, c, cm, plane, D: tl.constexpr, P: tl.constexpr):
    # rows plain, row j to copy j % P
    dst = extra + (r & (P - 1)) * plane + i * D
    tl.atomic_add(dst[:, None] + c[None, :], v, mask=plain[:, None] & cm[None, :],
                  sem="relaxed")


@triton.jit
def _warp_rows(copy, vals, r, i, plain, v, D: tl.constexpr, DP: tl.constexpr):
    # rows plain to one copy, 4 columns at a time (a warp's lanes on rows of one group of
    # columns), each warp's values of one address summed first (warp_sums)
    if DP == 4:
        c = tl.arange(0, 4)
        warp_add(copy + i[:, None] * D + c[None, :], plain[:, None] & (c < D)[None, :], v)
    else:
        for c0 in tl.static_range(0, DP, 4):
            c = c0 + tl.arange(0, 4)
            m = plain[:, None] & (c < D)[None, :]
            x = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0)
            warp_add(copy + i[:, None] * D + c[None, :], m, x)


@triton.jit
def _spread_sum(self_ptr, extra, out, plane, P: tl.constexpr, CP: tl.constexpr,
                BLOCK: tl.constexpr, PDL: tl.constexpr):
    # out := self + copies 0 .. P - 1 (left zero); the flag and a count of programs done
    # at extra + P * plane and the element after it (fp32), both left zero
    if PDL:
        tl.extra.cuda.gdc_wait()
    flag = extra + tl.full([], P, tl.int64) * plane
    bad = tl.load(flag) != 0
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m, other=0).to(tl.float32)
        for c0 in tl.static_range(0, P, CP):
            x += _copies(extra, plane, offs, m, c0, P + 1, CP, BLOCK)
        x = tl.where(bad, float("nan"), x)
        tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)
    # every program read the flag before it counts itself done: the last one clears both
    done = tl.atomic_add(flag + 1, 1.0, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        tl.store(flag, 0.0)
        tl.store(flag + 1, 0.0)


# the launches, without Triton's per-call argument binding (symm_mem.launch)
run_spread, run_spread_sum = Launcher(_spread), Launcher(_spread_sum)


def spread_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                     partitions: int, hot: int = 0, hot_min: int = 1, busy: int = 0,
                     busy_hot_min: int = 0, pdl: bool = True, block: int = BLOCK,
                     warps: int = WARPS,
                     sum_tile: int = SUM_TILE, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor), value ``j`` added to fp32 copy
    ``j % partitions`` of the output.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``partitions``: the copies (a power of two);
    ``hot``: candidates a block (0: none), whose rows are summed first where ``hot_min``
    or more of the block's rows hit one; ``busy``, ``busy_hot_min``: where ``warp_sums``
    run (``busy`` > 0, ``hot`` > 0, rows of a multiple of 4 elements, a GPU that
    ``has_warp_sums``; a block then takes at least 32 rows a warp), a candidate's rows are
    summed from ``busy_hot_min`` of them, and where ``busy`` to ``busy_hot_min - 1`` hit
    one, the block's other rows go to copy ``program % partitions``, each warp's values of
    one row summed before one atomic; ``pdl``: launch ``_spread_sum`` as a programmatic
    dependent of ``_spread`` where the GPU has it; ``block``, ``warps``: ``_spread``'s
    value elements a block and warps; ``sum_tile``: the copies' elements a ``_spread_sum``
    step loads; ``replay``: a list that receives this call's replay (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, DTYPES, "spread_index_add")
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        return out
    # the copies, then the flag and the count: zero on entry, and _spread_sum leaves them so
    extra = zeroed(self.device, partitions * plane + 2)
    if busy and hot and D % 4 == 0 and has_warp_sums(self.device):
        hot_min = busy_hot_min
    else:
        busy = 0
    spread, total = _launches(rows, n, D, partitions, hot, hot_min, busy, block, warps,
                              sum_tile, pdl and has_pdl(self.device))
    if spread is not None:
        spread(extra, index, values, n, rows, plane)
    total(self, extra, out, plane)
    if replay is not None:
        go = replay_call((spread, (extra, index, values, n, rows, plane)),
                         (total, (self, extra, out, plane)))
        if go is not None:
            replay.append(_replay(go, n, rows, plane, extra.numel()))
    return out


def _replay(go, n: int, rows: int, plane: int, extra_n: int):
    """``spread_index_add`` of one shape again (see ``replay``)."""
    spread, total = go

    def again(self, index, values):
        out = torch.empty_like(self)
        extra = zeroed(self.device, extra_n)
        if spread is not None:
            spread(extra, index, values, n, rows, plane)
        total(self, extra, out, plane)
        return out

    return again


@functools.lru_cache(maxsize=1024)
def _launches(rows: int, n: int, D: int, partitions: int, hot: int, hot_min: int, busy: int,
              block: int, warps: int, sum_tile: int, pdl: bool) -> tuple:
    """``spread_index_add``'s two launches for one shape and set of options (``pdl``:
    asked for and on a GPU that has it), each ``Launcher.prepare``'d (``_spread`` None
    where there are no values). Cached: a call of a shape seen before computes none of
    it."""
    plane = rows * D
    spread = None
    if n:
        dp = next_pow2(D)
        r = max(1, block // dp, 32 * warps if busy else 1)
        wide = max(n * D, partitions * plane + 2) >= 1 << 31
        spread = run_spread.prepare((cdiv(n, r),), warps, D=D, DP=dp, R=r, P=partitions,
                                    HOT=hot, HOT_MIN=hot_min, WIDE=wide, PDL=pdl,
                                    BUSY=busy)
    cp = min(partitions, SUM_COPIES)
    blk = max(64, sum_tile // cp)
    total = run_spread_sum.prepare((min(cdiv(plane, blk), SUM_PROGRAMS),), 4, pdl,
                                   P=partitions, CP=cp, BLOCK=blk, PDL=pdl)
    return spread, total
