"""Do bf16 narrow rows into a thousand rows run as fast as Inductor's bf16 partitions on
uniform indices when ``scatter_spread`` adds their plain rows to bf16 copies?

One GPU. bf16 rows of 4 into 1,024 rows stay with Inductor's partitions: on uniform
indices ``scatter_spread``'s fp32 copies took 16.6 µs against its 15.6, and on skewed and
hot indices 15.5 and 15.2 against 33.8 and 23.9 (``probe_spread_match_NVIDIA_H200.json``,
09bb6d8). Inductor's partitions add in bf16 (half the bytes of an fp32 add). Here the
plain rows go to ``P`` bf16 copies (value ``j`` to copy ``j % P``, a few adds an address
each), while a block's hot rows and busy blocks' warp sums still go to ``FP`` fp32 copies;
one sum adds both in fp32. Columns, in CUDA graphs, for 4M value elements, each checked
against float64 first (the bf16 copies under the probes' bound or, where it is over that,
the compiled column's error): ``spread busy``: the shipped kernels on fp32 copies (the
rule's warp sums); ``half``: bf16 copies, ``FP`` = ``P``; ``half fp8``: 8 fp32 copies;
``half busy``: with the warp sums; Inductor's plain and partitioned scatters
(``index_put``, the pass's choice for these cells).

    python benchmarks/probes/probe_spread_half.py [--out probe_spread_half.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import checked_errors, compiled_cell, ours, rounds, run_cells

from commrt.dispatch.profile import has_pdl
from commrt.fx.scatter_kernels import _copies, _rows_of
from commrt.fx.scatter_rule import (
    SPREAD_BUSY,
    SPREAD_BUSY_HOT_MIN,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
)
from commrt.fx.scatter_scratch import zeroed
from commrt.fx.scatter_spread import _warp_rows, spread_index_add
from commrt.symm_mem.launch import Launcher, cdiv

ROUNDS = 5
BF16 = torch.bfloat16
CELLS = tuple((BF16, w, 1024, d) for w in (4, 16) for d in ("uniform", "skewed", "hot"))
BLOCK, WARPS = 1024, 4
SUM_BLOCK, SUM_PROGRAMS = 64, 2048
BOUND = 8e-3  # relative error against float64, as probe_narrow_costs' for bf16


@triton.jit
def _spread_half(extra, half, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
                 R: tl.constexpr, P: tl.constexpr, FP: tl.constexpr, HOT: tl.constexpr,
                 HOT_MIN: tl.constexpr, PDL: tl.constexpr, BUSY: tl.constexpr):
    # scatter_spread._spread with its plain rows added in bf16 to copy j % P of half, and
    # its hot sums (and BUSY's warp sums) to fp32 copy pid % FP of extra; the flag at
    # extra + FP * plane
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    r = pid * R + tl.arange(0, R)
    c = tl.arange(0, DP)
    cm = c < D
    raw = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < n)[:, None] & cm[None, :],
                  other=0)
    v = raw.to(tl.float32)
    i, ok, bad = _rows_of(idx, r, n, rows, False)
    plain = ok
    busy = 0
    own = extra + (pid & (FP - 1)) * plane
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
            tl.atomic_add(own + h * D + c, s, mask=cm, sem="relaxed")
            plain = plain & (hit == 0)
    if busy > 0:
        _warp_rows(own, vals, r, i, plain, v, D, DP)
    else:
        dst = half + (r & (P - 1)) * plane + i * D
        tl.atomic_add(dst[:, None] + c[None, :], raw, mask=plain[:, None] & cm[None, :],
                      sem="relaxed")
    tl.store(extra + tl.full([], FP, tl.int64) * plane + 0 * r, 1.0, mask=bad)


@triton.jit
def _half_copies(half, plane, offs, m, c0, P: tl.constexpr, T: tl.constexpr,
                 BLOCK: tl.constexpr):
    # the fp32 sum of bf16 copies c0 .. c0 + T - 1 at offs, left zero
    c = (c0 + tl.arange(0, T)).to(tl.int64)
    at = half + c[:, None] * plane + offs[None, :]
    cm = (c[:, None] < P) & m[None, :]
    s = tl.sum(tl.load(at, mask=cm, other=0).to(tl.float32), axis=0)
    tl.store(at, tl.zeros([T, BLOCK], half.dtype.element_ty), mask=cm)
    return s


@triton.jit
def _half_sum(self_ptr, extra, half, out, plane, P: tl.constexpr, FP: tl.constexpr,
              BLOCK: tl.constexpr, PDL: tl.constexpr):
    # out := self + the FP fp32 copies + the P bf16 copies (all left zero); the flag and
    # the count of programs done at extra + FP * plane, left zero
    if PDL:
        tl.extra.cuda.gdc_wait()
    flag = extra + tl.full([], FP, tl.int64) * plane
    bad = tl.load(flag) != 0
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m, other=0).to(tl.float32)
        x += _copies(extra, plane, offs, m, 0, FP + 1, FP, BLOCK)
        x += _half_copies(half, plane, offs, m, 0, P, P, BLOCK)
        x = tl.where(bad, float("nan"), x)
        tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)
    done = tl.atomic_add(flag + 1, 1.0, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        tl.store(flag, 0.0)
        tl.store(flag + 1, 0.0)


run_half, run_half_sum = Launcher(_spread_half), Launcher(_half_sum)


def half_index_add(self, index, values, partitions: int, fp: int, busy: int = 0):
    """``self.index_add(0, index, values)`` (a new tensor) of bf16 (or fp16) rows: plain
    rows to ``partitions`` copies in their dtype, a block's hot rows (and, ``busy``, busy
    blocks' warp sums) to ``fp`` fp32 copies."""
    rows = self.shape[0]
    D = self.numel() // max(1, rows)
    n = index.numel()
    plane = rows * D
    assert plane % 8 == 0 and (fp + 1) * plane + 8 < 1 << 31, "a plane of 8k elements"
    out = torch.empty_like(self)
    start = fp * plane + 8  # the half copies from a 16-byte boundary after the flag
    extra = zeroed(self.device, start + partitions * plane // 2)
    half = extra[start:].view(values.dtype)
    pdl = has_pdl(self.device)
    dp = triton.next_power_of_2(D)
    r = max(BLOCK // dp, 32 * WARPS if busy else 1)
    go = run_half.prepare((cdiv(n, r),), WARPS, D=D, DP=dp, R=r, P=partitions, FP=fp,
                          HOT=SPREAD_HOT, HOT_MIN=SPREAD_BUSY_HOT_MIN if busy else
                          SPREAD_HOT_MIN, PDL=pdl, BUSY=busy)
    total = run_half_sum.prepare((min(cdiv(plane, SUM_BLOCK), SUM_PROGRAMS),), 4, pdl,
                                 P=partitions, FP=fp, BLOCK=SUM_BLOCK, PDL=pdl)
    go(extra, half, index, values, n, rows, plane)
    total(self, extra, half, out, plane)
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)
    calls = {
        "spread busy": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                                hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                                                busy_hot_min=SPREAD_BUSY_HOT_MIN),
        "half": lambda: half_index_add(out, idx, vals, P, P),
        "half fp8": lambda: half_index_add(out, idx, vals, P, 8),
        "half busy": lambda: half_index_add(out, idx, vals, P, P, SPREAD_BUSY),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals),
    }
    # the fp32 copies under the probes' bf16 bound; the bf16 copies (their adds rounded to
    # bf16) under it or the compiled column's error, the grid's accuracy target
    err = checked_errors(calls, ref, BOUND, lambda name: ours(name) and
                         not name.startswith("half"))
    for name in calls:
        if name.startswith("half"):
            assert err[name] < max(BOUND, err["inductor"]), (name, err)
    return {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
            "dist": dist, "err": err, **rounds(calls, ROUNDS), "partitions": P}


def main() -> None:
    run_cells(__doc__, "probe_spread_half.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
