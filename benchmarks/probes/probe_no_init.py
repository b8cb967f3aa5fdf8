"""Do the narrow kernels gain from dropping ``_init``: the plan made inside ``_scatter``,
every add into zero scratch copies, and ``_sum`` adding ``self`` to them?

One GPU. The narrow kernels run ``_init`` (program 0 plans, the others copy ``self`` into
the output), then ``_scatter`` (a programmatic dependent that waits for all of ``_init``),
then ``_sum`` where copies are allowed: on small outputs the plan and the wait sit on the
critical path where Inductor's plain scatter has only a copy. Here ``_scatter`` is the
first launch: the program that takes ticket 0 of a counter plans while every program
loads its first block, then the programs wait for the plan (``spin``) or, without
waiting, add on ``MIN_COPIES`` copies and no hot rows until it is there (``nowait``);
every add goes to zero scratch copies, and ``_sum`` (a programmatic dependent) stores
``self`` plus the copies and leaves them zero. For a few grid cells (4M value elements),
µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn) of the op as
the pass calls it, the two variants and Inductor's plain scatter (``index_put``).

    python benchmarks/probes/probe_no_init.py [--out probe_no_init.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import checked_rounds, run_cells

from commrt.dispatch.profile import has_pdl
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_kernels import _rows_of
from commrt.fx.scatter_narrow import (
    ROW_BLOCKS,
    ROW_BLOCKS_FROM,
    SUM_COPIES,
    SUM_TILE,
    VALUE_BLOCKS,
    _plan,
    _sample,
    narrow_index_add,
    state_numel,
)
from commrt.fx.scatter_rule import (
    HOT,
    HOT_ADDS,
    HOT_MIN,
    HOT_SHARE,
    MIN_COPIES,
    NARROW_PAIR_SAMPLE,
    NARROW_PER_ADDRESS,
    NARROW_SAMPLE,
    NARROW_SPREAD,
    pair_sample,
)
from commrt.fx.scatter_scratch import zeroed
from commrt.symm_mem.launch import cdiv, next_pow2

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"), (F32, 16, 1024, "hot"),
         (F32, 0, 65536, "uniform"), (F32, 0, 65536, "skewed"), (F32, 0, 65536, "hot"),
         (F32, 1, 65536, "skewed"), (F32, 4, 65536, "uniform"), (F32, 4, 65536, "hot"),
         (F32, 16, 65536, "uniform"), (F32, 16, 65536, "hot"),
         (BF16, 16, 1024, "uniform"), (BF16, 16, 1024, "skewed"), (BF16, 16, 1024, "hot"))
_sync: dict = {}  # int32 [ticket, ready] a device, zero between calls


@triton.jit
def _scatter_np(extra, idx, vals, state, sync, n, rows, plane, D: tl.constexpr,
                DP: tl.constexpr, SUB: tl.constexpr, ITERS: tl.constexpr, P: tl.constexpr,
                S: tl.constexpr, W: tl.constexpr, H: tl.constexpr, HOT_MIN: tl.constexpr,
                HOT_ADDS: tl.constexpr, HOT_SHARE: tl.constexpr,
                PER_ADDRESS: tl.constexpr, MIN_COPIES: tl.constexpr, SPREAD: tl.constexpr,
                PLAN: tl.constexpr, SPIN: tl.constexpr, P0: tl.constexpr,
                PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    c = tl.arange(0, DP)
    cm = c < D
    bad_any = tl.zeros([SUB], tl.int32)
    for it in tl.static_range(ITERS):
        r = (pid * ITERS + it) * SUB + tl.arange(0, SUB)
        if D == 1:
            v = tl.load(vals + r, mask=r < n, other=0).to(tl.float32)
        else:
            v = tl.load(vals + r[:, None] * D + c[None, :],
                        mask=(r < n)[:, None] & cm[None, :], other=0).to(tl.float32)
        i, ok, bad = _rows_of(idx, r, n, rows, False)
        if it == 0:
            p = 1
            nhot = 0
            if PLAN:
                if tl.atomic_add(sync, 1, sem="relaxed") == 0:  # the planner
                    a, first = _sample(idx, n, rows, S, W)
                    pp, hot, nh, _, _ = _plan(a, first, state + 5 + H, n, rows, W, P, H,
                                              HOT_MIN, HOT_ADDS, HOT_SHARE, PER_ADDRESS,
                                              MIN_COPIES, SPREAD, W != S)
                    tl.store(state + 3 + tl.arange(0, H), hot)
                    tl.store(state, pp)
                    tl.store(state + 2, nh)
                    tl.atomic_xchg(sync + 1, 1, sem="release")
                if SPIN:
                    ready = tl.load(sync + 1, volatile=True)
                    while ready == 0:
                        ready = tl.load(sync + 1, volatile=True)
                    # an acquire whose value is used, so that the plan's loads stay after it
                    ready = tl.atomic_add(sync + 1, 0, sem="acquire")
                    p = tl.where(ready != 0, tl.load(state, cache_modifier=".cg"), 1)
                    nhot = tl.where(ready != 0, tl.load(state + 2, cache_modifier=".cg"), 0)
                else:
                    ready = tl.atomic_add(sync + 1, 0, sem="acquire")
                    p = tl.where(ready != 0, tl.load(state, cache_modifier=".cg"), P0)
                    nhot = tl.where(ready != 0, tl.load(state + 2, cache_modifier=".cg"), 0)
        bad_any |= bad.to(tl.int32)
        plain = ok
        for k in range(nhot):  # hot rows' block sums go to copy 0
            h = tl.load(state + 3 + k, cache_modifier=".cg")
            hit = ok & (i == h)
            plain = plain & (i != h)
            if D == 1:
                tl.atomic_add(extra + h, tl.sum(tl.where(hit, v, 0.0)), sem="relaxed")
            else:
                s = tl.sum(tl.where(hit[:, None], v, 0.0), axis=0)
                tl.atomic_add(extra + h * D + c, s, mask=cm, sem="relaxed")
        part = (r + pid) & (p - 1)
        dst = extra + (part * plane + i * D)
        if D == 1:
            tl.atomic_add(dst, v, mask=plain, sem="relaxed")
        else:
            tl.atomic_add(dst[:, None] + c[None, :], v, mask=plain[:, None] & cm[None, :],
                          sem="relaxed")
    if tl.max(bad_any) > 0:  # poison copy 0, which _sum always reads
        for start in range(0, plane, 1024):
            offs = start + tl.arange(0, 1024)
            tl.store(extra + offs, tl.full([1024], float("nan"), tl.float32),
                     mask=offs < plane)


@triton.jit
def _sum_np(self_ptr, extra, out, state, sync, plane, P0: tl.constexpr,
            BLOCK: tl.constexpr, CP: tl.constexpr, PLAN: tl.constexpr, PDL: tl.constexpr):
    # out := self + copies 0 .. max(p, P0) - 1, which it leaves zero
    if PDL:
        tl.extra.cuda.gdc_wait()
    p = P0
    if PLAN:
        p = tl.maximum(tl.load(state, cache_modifier=".cg"), P0)
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, plane, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m, other=0).to(tl.float32)
        for c0 in range(0, p, CP):
            cc = c0 + tl.arange(0, CP)
            at = extra + cc[:, None] * plane + offs[None, :]
            cmask = (cc[:, None] < p) & m[None, :]
            x += tl.sum(tl.load(at, mask=cmask, other=0), axis=0)
            tl.store(at, tl.zeros([CP, BLOCK], tl.float32), mask=cmask)
        tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)
    if PLAN:
        if pid == 0:
            tl.store(sync, 0)
            tl.store(sync + 1, 0)


def no_init_index_add(self, index, values, partitions: int, spin: bool = True,
                      pairs: int = NARROW_PAIR_SAMPLE):
    """``self.index_add(0, index, values)`` as above (``partitions``: the most copies)."""
    rows, n = self.shape[0], index.numel()
    D = self.numel() // rows
    P = partitions
    H = HOT
    DP = next_pow2(D)
    step, iters, nw = ROW_BLOCKS if D >= ROW_BLOCKS_FROM else VALUE_BLOCKS
    sub = max(16, step // DP)
    plane = rows * D
    out = torch.empty_like(self)
    extra = zeroed(self.device, P * plane)
    state = torch.empty(state_numel(HOT), device=self.device, dtype=torch.int32)
    sync = _sync.get(self.device)
    if sync is None:
        sync = _sync[self.device] = torch.zeros(2, device=self.device, dtype=torch.int32)
    W = 2 * pairs if P > 1 and pairs else NARROW_SAMPLE
    p0 = 1 if spin or P == 1 else min(MIN_COPIES, P)
    pdl = has_pdl(self.device)
    _scatter_np[(cdiv(n, sub * iters),)](
        extra, index, values, state, sync, n, rows, plane, D=D, DP=DP, SUB=sub, ITERS=iters,
        P=P, S=NARROW_SAMPLE, W=W, H=H, HOT_MIN=HOT_MIN, HOT_ADDS=HOT_ADDS,
        HOT_SHARE=HOT_SHARE, PER_ADDRESS=NARROW_PER_ADDRESS,
        MIN_COPIES=min(MIN_COPIES, P), SPREAD=NARROW_SPREAD, PLAN=True, SPIN=spin, P0=p0,
        PDL=pdl, num_warps=nw)
    cp = min(next_pow2(P), SUM_COPIES)
    blk = max(64, SUM_TILE // cp)
    _sum_np[(min(cdiv(plane, blk), 2048),)](
        self, extra, out, state, sync, plane, P0=p0, BLOCK=blk, CP=cp, PLAN=True, PDL=pdl,
        num_warps=4, **({"launch_pdl": True} if pdl else {}))
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    def op(out, idx, vals, P):
        return narrow_index_add(out, idx, vals, P, pair_sample=pair_sample(rows))

    def spin(out, idx, vals, P):
        return no_init_index_add(out, idx, vals, P, pairs=pair_sample(rows))

    def nowait(out, idx, vals, P):
        return no_init_index_add(out, idx, vals, P, spin=False, pairs=pair_sample(rows))

    variants = {"op": op, "spin": spin, "nowait": nowait}
    P = pass_scatter.copies(rows, max(1, width), (4 << 20) // max(1, width), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    if P == 1:
        del variants["nowait"]  # without waiting, hot rows would land on one copy
    row = checked_rounds(dtype, width, rows, dist, variants, ROUNDS)
    row["triton"] = triton.__version__
    return row


def main() -> None:
    run_cells(__doc__, "probe_no_init.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds")


if __name__ == "__main__":
    main()
