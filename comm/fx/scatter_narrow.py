"""Triton kernels for accumulating scatters of narrow rows (1-D values, rows of up to
``NARROW_ROW`` elements; rows of up to ``ONE_COPY_ROW`` with one copy) behind
``commrt::partitioned_index_put`` on CUDA.

Two or three launches, no host sync; the plan is made on the GPU from the indices:

1. ``_init``: program 0 makes the plan (``_plan``) from a strided sample of
   ``NARROW_SAMPLE`` indices while every other program copies a block of ``self`` into
   ``acc`` (fp32; the output itself when that is fp32).
   Its *hot rows* are up to ``HOT`` rows that occur at least ``HOT_MIN`` times in the
   sample and would put over ``HOT_ADDS`` adds on one copy, and on each of ``P`` copies
   unless they take ``1 / HOT_SHARE`` of the sample. From the rest of the sample (and,
   where copies are allowed and the caller asks for it, its pairs with a second sample of
   ``pair_sample`` indices; the pass does on outputs of over ``NARROW_PAIR_ROWS`` rows) it
   estimates the atomic adds an address takes (``n`` times the chance that two adds
   share a row, and no fewer than an even spread over the rows gives); under
   ``PER_ADDRESS`` one copy takes them (plain atomics), else the power of two
   (``MIN_COPIES`` to ``P``) that brings them under ``NARROW_SPREAD``. With two samples
   it sorts them together and counts each row's entries of each with segmented scans;
   with one it compares every pair of entries, against shifted loads of a copy of the
   sample in ``state``. The ``p - 1`` extra copies are ``scatter_scratch``'s, zero on
   entry: no launch zeroes them.
2. ``_scatter``: a program takes ``ITERS`` blocks of ``SUB`` rows (one block of 4,096
   values for rows of ``ROW_BLOCKS_FROM`` elements or more). For each hot row it
   sums the block's rows that hit it and adds the sum once; every other row is added with
   an atomic to copy ``(row + program) % p``. With ``local`` (as the pass gives it: one
   copy, no hot rows, so no plan in ``_init``) the rows of a block whose index ``local``
   of them share are summed and added once instead (found before waiting for ``_init``
   with ``local_early``), and with ``columns`` a block holds that
   many columns of more rows (a row's blocks launched one after another). An index out of
   range poisons the output with NaN (the plain op raises a device-side assert). On sm90+
   it is launched as a programmatic dependent of ``_init``: its first block's values and
   indices load while program 0 still plans.
3. ``scatter_kernels._sum`` (only where ``P > 1`` or the output is not fp32): output :=
   ``acc`` plus the ``p - 1`` extra copies, in the output's dtype; it leaves the copies
   it read zero. On sm90+ a programmatic dependent of ``_scatter``, which lets it launch
   once every program has seen the plan where it may have nothing to do (an fp32 output,
   or ``OWN_ADDS``): it then reads the plan and returns without waiting.

int32 values (into an int32 output, ``scatter_rule.int_narrow``) take the same launches
summed in int32: ``acc`` and the copies are int32 (exact, wrapping as torch's sums do),
on ``INT_BLOCKS`` or ``INT_THREAD_BLOCKS`` (one element a thread; rows over
``NARROW_ROW`` elements in blocks of ``INT_COLUMNS`` columns), and an index out of range is
a device-side assert, as in torch's op.

With ``HALF_ADDS`` (fp16/bf16, one copy) ``acc`` is the output in its own dtype: ``_init``
copies ``self`` into it, ``_scatter`` adds the values with atomics of that dtype (as
Inductor's scatter does) and each hot row's block sums in fp32 to a side buffer, which the
last ``_scatter`` program to finish adds to the output; there is no ``_sum``. With
``OWN_ADDS`` (fp16/bf16, one copy) the plan makes that choice on the GPU: ``_init`` copies
``self`` into the output and into ``acc``, and where the plan finds no hot row and at most
``OWN_ADDS`` adds an address ``_scatter`` adds in the output's dtype and ``_sum`` does
nothing; else they run through ``acc`` as above.
"""

import functools

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_kernels import SUM_PROGRAMS, _rows_of, poison, row_alignment, run_sum, scatter_shape
from .scatter_rule import (
    HOT,
    HOT_ADDS,
    HOT_MIN,
    HOT_SHARE,
    MIN_COPIES,
    NARROW_PAIR_SAMPLE,
    NARROW_PER_ADDRESS,
    NARROW_ROW,
    NARROW_SAMPLE,
    NARROW_SPREAD,
    ONE_COPY_ROW,
)
from .scatter_scratch import zeroed

BLOCK = 2048  # elements a step of an _init or _sum program
# ... of an _init program that copies a 16-bit output (half_adds): in an A/B on one H200
# (docs/decisions/2026-11-25-scatter-half-precision-rows-few-values.md) bf16 rows of 16 into
# 1M rows took 23.4 µs so against 26.4, rows of 100 and 1024 into 65,536 rows 8.9 and 73.6
# against 10.2 and 81.2; fp32 rows of 1024 on 65,536 rows were 2% slower with it.
HALF_BLOCK = 8192
# warps of an _init program: its plan (program 0) took 3.7 µs on 4 warps against 4.4 on 8
# with 64 registers a thread
# (docs/decisions/2026-11-25-scatter-narrow-plan-compares-elementwise-4.md); HALF_BLOCK was
# measured on 8. With one sample on an output under ONE_SAMPLE_PLANE elements, 2
# (INIT_WARPS_ONE): on one H200 (benchmarks/results/probe_plan_cost_NVIDIA_H200.json) fp32
# rows of 16 into 65,536 rows took 9.6 µs so against 10.1, bf16 7.3 against 7.4; rows of 16
# into 1M rows 0.3% longer (the copy of 16M elements), and sorted two samples 0.3-0.7 µs
# longer.
INIT_WARPS, INIT_WARPS_ONE, ONE_SAMPLE_PLANE = 4, 2, 1 << 22
SUM_COPIES, SUM_TILE = 128, 8192  # _sum with copies: copies a step, and elements a step
# ... but where the plan chose at most SUM_FIT + 1 copies, those in one tile: on one H200
# (benchmarks/results/probe_sum_tiles_twins_NVIDIA_H200.json) fp32 rows of 16 into 1,024
# rows, uniform (16 copies), took 11.3 µs so against 11.8, bf16 11.8 against 12.9; more
# copies within the rounds' spread
# (docs/decisions/2026-11-28-scatter-sum-reads-copies-plan-chose.md).
SUM_FIT = 32
# _scatter's blocks (SUB rows of DP columns): (value elements a block, blocks a program,
# warps). Rows of ROW_BLOCKS_FROM elements or more take one block of 4,096 on 8 warps (a hot
# row's sum once a program): in an A/B on one H200
# (docs/decisions/2026-11-25-scatter-narrow-rows-4-more-take.md) rows of 4 and 16 with a hot
# row ran 1.24-1.48x faster, others from 4% faster to 2% slower; 1-D values ran up to 4%
# slower so, and keep four blocks of 1,024 on 4 warps.
VALUE_BLOCKS = (1024, 4, 4)
ROW_BLOCKS, ROW_BLOCKS_FROM = (4096, 1, 8), 4
# ... int32 values (one atomic an element: sm90 has no vector integer adds) in narrow rows:
# on one H100 (benchmarks/results/probe_int32_rows_NVIDIA_H100_80GB_HBM3.json, bb61fb8), µs
# uniform / skewed, rows of 4 into 65,536 rows 36.4 / 112.9 against 53.1 / 170.4 on
# ROW_BLOCKS (Inductor's plain scatter 37.1 / 113.8), into 1M rows 44.6 / 53.4 against
# 64.8 / 80.8; rows of 16 into 65,536 rows, uniform, 16.5 against 30.3; 1-D values into 1M
# rows 59.0 / 98.3 against 62.3 / 108.1 on VALUE_BLOCKS (Inductor 59.9 / 99.3)
INT_BLOCKS = (512, 1, 8)
# ... but one element a thread (256 on 8 warps) for rows of INT_THREAD_ROWS elements and
# rows wider than NARROW_ROW (blocks of INT_COLUMNS columns): on one H100
# (benchmarks/results/probe_int_blocks_NVIDIA_H100_80GB_HBM3.json, 7e9d88d), µs uniform /
# skewed, rows of 4 into 65,536 rows 25.0 / 37.5 against 38.2 / 55.5 on INT_BLOCKS (hot
# 32.9 against 27.3; Inductor's best 53.0 / 74.4 / 172.5), where rows of 16 into 1,024 rows
# took 24.5 against 18.4 uniform and 1-D values into 1M rows with a hot row 46.9 against 40.8
INT_THREAD_BLOCKS, INT_THREAD_ROWS, INT_COLUMNS = (256, 1, 8), (2, 8), 16
LOCAL_SUB = 64  # the most rows a block for which _scatter sums rows that share an index
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second axis


@triton.jit
def _sample(idx, n, rows, S: tl.constexpr, W: tl.constexpr):
    """(sampled output rows, entries of the first sample): ``S`` strided indices; with
    ``W`` over ``S``, ``W`` entries, the first half holding them and the second half a
    second strided sample of ``W // 2`` (at least ``S``) indices, each half its stride on.
    An index out of range, a padding entry or no index becomes a negative value no other
    entry has."""
    pos = tl.arange(0, W)
    if W == S:
        at = pos * tl.maximum(n // S, 1)
        first = at < n
        valid = first
    else:
        second = pos >= W // 2
        j = tl.where(second, pos - W // 2, pos)
        step = tl.where(second, tl.maximum(n // (W // 2), 1), tl.maximum(n // S, 1))
        at = j * step + tl.where(second, step // 2, 0)
        first = (at < n) & (j < S) & (second == 0)
        valid = first | (second & (at < n))
    a = tl.load(idx + at, mask=valid, other=0)
    a = tl.where(a < 0, a + rows, a)
    return tl.where(valid & (a >= 0) & (a < rows), a, -2 - pos).to(tl.int32), first


@triton.jit
def _runs(row_l, a_l, b_l, row_r, a_r, b_r):
    # a segmented count over sorted rows: the right part's last row, and its entries of
    # the first and second sample, those of the left part added where that row continues
    # (sorted: the left part's last row equals the right part's only if all of it is that row)
    same = row_l == row_r
    return row_r, a_r + tl.where(same, a_l, 0), b_r + tl.where(same, b_l, 0)


@triton.jit
def _plan(a, first, scr, n, rows, W: tl.constexpr, P: tl.constexpr, H: tl.constexpr,
          HOT_MIN: tl.constexpr, HOT_ADDS: tl.constexpr, HOT_SHARE: tl.constexpr,
          PER_ADDRESS: tl.constexpr, MIN_COPIES: tl.constexpr, SPREAD: tl.constexpr,
          PAIRS: tl.constexpr):
    """(copies p, hot rows [H] (-1: none), how many hot, the adds an address expects
    off the hot rows, and the same with one equal pair fewer) from the sample ``a`` of ``W``
    entries (``first``: those of its first sample). ``PAIRS``: ``a``'s second half is a
    second sample (``_sample``), whose pairs with the first count too; the entries are
    sorted, each tagged with its sample, and two segmented scans (forward and back) count
    each row's entries of each. Else each entry is compared with shifted loads of a copy of
    ``a`` at ``scr`` (2 * W int32 the program owns; ``a`` twice, so that a shift is an
    offset). On one H200
    (docs/decisions/2026-11-27-scatter-narrow-plan-sorts-two-samples.md) the sort took
    0.4-1.1 µs less than the shifted loads of both samples, the shifted loads of one sample
    1.9-2.4 µs less than its sort."""
    sampled = tl.maximum(tl.sum(first.to(tl.int32)), 1).to(tl.float32)
    if PAIRS:  # row * 2 + tag: a row's entries of both samples sort next to each other
        half = tl.arange(0, W) >= W // 2
        k = tl.sort(a.to(tl.int64) * 2 + half.to(tl.int64))
        row = k >> 1
        in_b = (k & 1).to(tl.int32)
        in_a = 1 - in_b
        _, fa, fb = tl.associative_scan((row, in_a, in_b), 0, _runs)
        _, ba, bb = tl.associative_scan((row, in_a, in_b), 0, _runs, reverse=True)
        count = fa + ba - in_a  # entries of the first sample on this entry's row
        count_b = fb + bb - in_b  # ... of the second
        lead = (in_a == 1) & (fa == 1)  # a row's first entry of the first sample
    else:
        pos = tl.arange(0, W)
        tl.store(scr + pos, a)
        tl.store(scr + W + pos, a)
        tl.debug_barrier()  # the copy is the program's, seen by all of its threads
        row = a
        in_a = tl.full([W], 1, tl.int32)
        count = tl.full([W], 1, tl.int32)  # occurrences of a[i], itself included
        earlier = tl.zeros([W], tl.int32)  # a[i] occurs before i
        for s in tl.static_range(1, W):
            e = a == tl.load(scr + pos + s)  # a[(i + s) % W]
            count += e.to(tl.int32)
            earlier |= (e & (pos + s >= W)).to(tl.int32)
        lead = earlier == 0
    # hot: a row that HOT_MIN of the sample hit, that would put over HOT_ADDS adds on one
    # copy, and either on each of P copies or that takes 1 / HOT_SHARE of the sample (rows
    # of a few percent each go to copies: a hot row costs a reduction a block)
    adds_row = n * count.to(tl.float32) / sampled
    heavy = (row >= 0) & (count >= HOT_MIN) & (adds_row > HOT_ADDS) & \
        ((adds_row > P * HOT_ADDS) | (count * HOT_SHARE >= sampled))
    hot = tl.full([H], -1, tl.int32)
    nhot = 0
    if tl.max(heavy.to(tl.int32)) > 0:  # rare: the reductions below only then
        cand = heavy & lead  # a row once; S // HOT_MIN <= H: all fit
        rank = tl.cumsum(cand.to(tl.int32), axis=0) - cand.to(tl.int32)
        pick = cand[:, None] & (rank[:, None] == tl.arange(0, H)[None, :])
        hot = (tl.sum(tl.where(pick, row[:, None] + 1, 0), axis=0) - 1).to(tl.int32)
        nhot = tl.sum((hot >= 0).to(tl.int32))
    rest = (in_a == 1) & (row >= 0) & (heavy == 0)
    m = tl.sum(rest.to(tl.int32)).to(tl.float32)
    same = tl.where(rest, count - 1, 0)  # ordered equal pairs, by a's entry
    pairs = m * (m - 1.0)
    if PAIRS:  # 64 entries see 5 pairs where 1% of rows take 90%, and none 1 time in 10
        same += tl.where(rest, count_b, 0)
        brest = tl.sum(((in_b == 1) & (row >= 0) & (heavy == 0)).to(tl.int32))
        pairs += m * brest.to(tl.float32)
    # adds an address takes, seen from an add: n_rest * P(two rest adds share a row)
    n_rest = n * m / sampled
    seen = tl.sum(same).to(tl.float32)
    adds = tl.maximum(n_rest * seen / tl.maximum(pairs, 1.0), n_rest / rows)
    # ... no fewer than an even spread gives. One equal pair is noise where the indices
    # spread (1M uniform into 65,536 rows, 16 adds an address: in about 1 index set in
    # 11 with both samples), and reads as 129-258 adds an address there; less: the
    # estimate without one pair (2 in ``same``: its two ordered pairs, or two pairs with
    # the second sample)
    less = tl.maximum(n_rest * tl.maximum(seen - 2.0, 0.0) / tl.maximum(pairs, 1.0),
                      n_rest / rows)
    p = MIN_COPIES
    while (p * SPREAD < adds) & (p < P):
        p *= 2
    if adds <= PER_ADDRESS:
        p = 1
    p = tl.minimum(p, P)
    return p, hot, nhot, adds, less


@triton.jit
def _plan_store(state, p, hot, nhot, H: tl.constexpr):
    tl.store(state + 3 + tl.arange(0, H), hot)
    tl.store(state, p)
    tl.store(state + 1, 0)
    tl.store(state + 2, nhot)


@triton.jit
def _init(self_ptr, acc, extra, idx, state, n, rows, plane, P: tl.constexpr,
          S: tl.constexpr, W: tl.constexpr, H: tl.constexpr, HOT_MIN: tl.constexpr,
          HOT_ADDS: tl.constexpr, HOT_SHARE: tl.constexpr, PER_ADDRESS: tl.constexpr,
          MIN_COPIES: tl.constexpr, SPREAD: tl.constexpr, BLOCK: tl.constexpr,
          WIDE: tl.constexpr, PDL: tl.constexpr, HALF_ADDS: tl.constexpr = False,
          HD: tl.constexpr = 1, out=None, OWN_ADDS: tl.constexpr = 0,
          WAIT: tl.constexpr = False):
    # Program 0 makes the plan, every other program copies one block of self into acc.
    # OWN_ADDS > 0 (fp16/bf16, one copy): self is copied into out too, and the plan adds
    # in out's dtype (state[4 + H] = 1) where no row is hot and an address expects at
    # most OWN_ADDS adds. WAIT: launched as a programmatic dependent of the launch before
    # it, whose results it waits for before it reads anything.
    if WAIT:
        tl.extra.cuda.gdc_wait()
    if PDL:  # _scatter's programs may start (they load values and indices, then wait)
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    if pid == 0:
        if (P == 1) & (HOT_MIN > S) & (OWN_ADDS == 0):  # one copy, no hot rows: no plan
            _plan_store(state, 1, tl.full([H], -1, tl.int32), 0, H)
        else:
            a, first = _sample(idx, n, rows, S, W)
            p, hot, nhot, _, less = _plan(a, first, state + 5 + H, n, rows, W, P, H, HOT_MIN,
                                          HOT_ADDS, HOT_SHARE, PER_ADDRESS, MIN_COPIES,
                                          SPREAD, W != S)
            _plan_store(state, p, hot, nhot, H)
            if OWN_ADDS > 0:  # a speed choice: one equal pair does not tip it
                tl.store(state + 4 + H, ((nhot == 0) & (less <= OWN_ADDS)).to(tl.int32))
        if HALF_ADDS:  # the hot rows' fp32 sums, and the programs done
            tl.store(extra + tl.arange(0, HD), tl.zeros([HD], tl.float32))
            tl.store(state + 3 + H, 0)
    else:
        if WIDE:  # a name of its own: pid's type is fixed outside this branch
            start = (pid.to(tl.int64) - 1) * BLOCK
        else:
            start = (pid - 1) * BLOCK
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m)
        tl.store(acc + offs, x.to(acc.dtype.element_ty), mask=m)
        if OWN_ADDS > 0:
            tl.store(out + offs, x, mask=m)


@triton.jit
def _scatter(acc, extra, idx, vals, state, n, rows, plane, D: tl.constexpr,
             DP: tl.constexpr, SUB: tl.constexpr, ITERS: tl.constexpr, P: tl.constexpr,
             WIDE: tl.constexpr, PDL: tl.constexpr, HALF_ADDS: tl.constexpr = False,
             H: tl.constexpr = 1, LOCAL: tl.constexpr = 0,
             COLS_FIRST: tl.constexpr = False, out=None, OWN: tl.constexpr = False,
             EARLY: tl.constexpr = False, LOCAL_EARLY: tl.constexpr = False,
             ALIGN: tl.constexpr = 1, TRIGGER: tl.constexpr = True,
             INT: tl.constexpr = False):
    # D == 1 (1-D values) runs on 1-D blocks; wider rows on [SUB, DP] blocks, DP columns
    # from program_id(1) * DP (a row wider than DP spans programs; COLS_FIRST: the axes
    # swapped, so that a row's column blocks launch one after another). PDL: launched
    # while _init runs; the first block's values and indices (written before _init) load
    # before waiting for it, the plan and the copies after. LOCAL > 0: rows of a block
    # whose index LOCAL of its rows share are summed (in fp32) and added once. _sum may
    # launch as soon as every program has started (it waits for them to finish; EARLY:
    # as soon as every program has seen the plan, so that _sum may read it without
    # waiting). OWN: where the plan says so (state[4 + H]), add into out in its fp16/bf16
    # dtype instead. LOCAL_EARLY (LOCAL > 0, no hot rows): the rows that share an index
    # are found before waiting, and no hot row is looked for. ALIGN: the bytes every row of
    # acc and extra starts on, where P > 1 (row_alignment). TRIGGER: _sum follows (else
    # the next launch, maybe the next scatter's _init, waiting, starts only as this ends).
    # INT: int32 values into an int32 acc, summed in int32 (exact, wrapping as torch's
    # sums do); an index out of range is a device-side assert (Triton's debug on).
    if PDL and TRIGGER and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    if COLS_FIRST:  # DP columns a program from program_id(0) * DP, rows on axis 1
        pid = tl.program_id(1)
        c = tl.program_id(0) * DP + tl.arange(0, DP)
    else:
        pid = tl.program_id(0)
        c = tl.program_id(1) * DP + tl.arange(0, DP)
    cm = c < D
    bad_any = tl.zeros([SUB], tl.int32)
    for it in tl.static_range(ITERS):
        r = (pid * ITERS + it) * SUB + tl.arange(0, SUB)
        if WIDE:
            r = r.to(tl.int64)
        # the values load masked by r < n only, so that it does not wait for the indices
        if D == 1:
            vn = tl.load(vals + r, mask=r < n, other=0)
        else:
            vn = tl.load(vals + r[:, None] * D + c[None, :],
                         mask=(r < n)[:, None] & cm[None, :], other=0)
        if INT:
            v = vn
        else:
            v = vn.to(tl.float32)
        if HALF_ADDS:  # plain adds in the output's dtype
            vp = vn
        else:
            vp = v
        i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
        if INT:
            tl.device_assert(bad == 0, "index out of range in a commrt scatter")
        if LOCAL_EARLY:  # needs the indices only
            eq, member = _local_members(i, ok, SUB, LOCAL)
        if it == 0:
            if PDL:
                tl.extra.cuda.gdc_wait()
                if EARLY:
                    tl.extra.cuda.gdc_launch_dependents()
            p = 1
            if P > 1:
                p = tl.load(state)
            nhot = 0
            if not LOCAL_EARLY:
                nhot = tl.load(state + 2)
            own = False
            if OWN:
                own = tl.load(state + 4 + H) != 0
        bad_any |= bad.to(tl.int32)
        plain = ok
        for k in range(nhot):  # one add a hot row a block
            h = tl.load(state + 3 + k)
            hit = ok & (i == h)
            plain = plain & (i != h)
            if HALF_ADDS:
                hp = extra + k * D
            else:
                hp = acc + h * D
            if D == 1 and INT:  # a sum of shape [1]: Triton 3.6's interpreter refuses a
                # scalar int32 sum that wraps (the GPU wraps either)
                tl.atomic_add(hp + tl.arange(0, 1),
                              tl.sum(tl.where(hit, v, 0)[None, :], axis=1), sem="relaxed")
            elif D == 1:
                tl.atomic_add(hp, tl.sum(tl.where(hit, v, 0)), sem="relaxed")
            else:
                s = tl.sum(tl.where(hit[:, None], v, 0), axis=0)
                tl.atomic_add(hp + c, s, mask=cm, sem="relaxed")
        if LOCAL > 0:
            if not LOCAL_EARLY:
                eq, member = _local_members(i, plain, SUB, LOCAL)
            plain = _local_sums(acc, i, plain, eq, member, v, c, cm, D, SUB)
        off = i * D
        if P > 1:
            part = (r + pid) & (p - 1)  # p is a power of two
            dst = tl.multiple_of(tl.where(part == 0, acc + off,
                                          extra + ((part - 1) * plane + off)), ALIGN)
        else:
            dst = acc + off
        if own:  # one copy, no hot rows: dst is acc + off
            if D == 1:
                tl.atomic_add(out + off, vn, mask=plain, sem="relaxed")
            else:
                tl.atomic_add(out + off[:, None] + c[None, :], vn,
                              mask=plain[:, None] & cm[None, :], sem="relaxed")
        elif D == 1:
            tl.atomic_add(dst, vp, mask=plain, sem="relaxed")
        else:
            tl.atomic_add(dst[:, None] + c[None, :], vp, mask=plain[:, None] & cm[None, :],
                          sem="relaxed")
    if not INT:
        if tl.max(bad_any) > 0:
            tl.store(state + 1, 1)
            poison(acc, plane)
            if OWN:
                poison(out, plane)
    if HALF_ADDS:  # the last program done adds the hot rows' sums to the output
        if nhot > 0:
            tl.debug_barrier()
            done = tl.atomic_add(state + 3 + H, 1, sem="acq_rel")
            if done == tl.num_programs(0) * tl.num_programs(1) - 1:
                for k in range(nhot):
                    h = tl.load(state + 3 + k)
                    for c0 in tl.static_range(0, D, DP):  # every column of the row
                        cc = c0 + tl.arange(0, DP)
                        o = acc + h * D + cc
                        x = tl.load(o, mask=cc < D, cache_modifier=".cg").to(tl.float32)
                        x += tl.load(extra + k * D + cc, mask=cc < D, cache_modifier=".cg")
                        tl.store(o, x.to(acc.dtype.element_ty), mask=cc < D)


@triton.jit
def _local_members(i, plain, SUB: tl.constexpr, LOCAL: tl.constexpr):
    """(which of the rows ``plain`` share their output row ``i``, which of them share it
    with at least ``LOCAL - 1`` others)."""
    eq = (i[:, None] == i[None, :]) & plain[:, None] & plain[None, :]
    return eq, plain & (tl.sum(eq.to(tl.int32), axis=1) >= LOCAL)


@triton.jit
def _local_sums(acc, i, plain, eq, member, v, c, cm, D: tl.constexpr, SUB: tl.constexpr):
    """Add, once each, the sums of the rows ``member`` (``_local_members``) of the block
    ``v``; returns the rows of ``plain`` still to add one by one."""
    if tl.max(member.to(tl.int32)) > 0:
        pos = tl.arange(0, SUB)
        earlier = tl.max((eq & (pos[None, :] < pos[:, None])).to(tl.int32), axis=1)
        lead = member & (earlier == 0)  # the first row of each shared index
        rank = tl.cumsum(lead.to(tl.int32), axis=0) - 1
        for k in range(tl.sum(lead.to(tl.int32))):
            h = tl.sum(tl.where(lead & (rank == k), i, 0))
            s = tl.sum(tl.where((member & (i == h))[:, None], v, 0.0), axis=0)
            tl.atomic_add(acc + h * D + c, s.to(acc.dtype.element_ty), mask=cm,
                          sem="relaxed")
        plain = plain & (member == 0)
    return plain


DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
SUMMED_IN_ACC = (torch.float32, torch.int32)  # outputs acc is: no copy of their own


# the launches, without Triton's per-call argument binding (symm_mem.launch); int32's
# _scatter with Triton's debug on (its assert) and no overflow checks (the sums wrap)
run_init, run_scatter = Launcher(_init), Launcher(_scatter)
run_int_scatter = Launcher(_scatter, debug=True, sanitize_overflow=False)


def state_numel(hot: int = HOT) -> int:
    """int32 entries of ``narrow_index_add``'s ``state``: the plan (copies, error, hot
    rows, ``max(1, hot)`` rows), the programs done, whether it adds in the output's dtype,
    and the planner's copy of its first sample."""
    return 5 + max(1, hot) + 2 * NARROW_SAMPLE


def narrow_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                     partitions: int, per_address: int = NARROW_PER_ADDRESS,
                     min_copies: int = MIN_COPIES, hot: int = HOT,
                     hot_min: int = HOT_MIN, hot_adds: int = HOT_ADDS,
                     state: torch.Tensor | None = None, pdl: bool = True,
                     spread: int = NARROW_SPREAD, pair_sample: int = NARROW_PAIR_SAMPLE,
                     half_adds: bool = False, local: int = 0,
                     columns: int = 0, warps: int = 0, own_adds: int = 0,
                     sum_early: bool = True, local_early: bool = False,
                     wait_first: bool = True, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) with the scheme above.

    ``self`` and ``values`` contiguous, of one of ``DTYPES`` (int32 into int32 only),
    rows of at most ``ONE_COPY_ROW`` elements (the pass sends rows over ``NARROW_ROW`` only
    with one copy), ``values`` shaped ``[len(index), *self.shape[1:]]``; ``partitions``: the
    most copies (a power of two; 1: never more than the output); ``per_address``: the adds
    an address may take before copies pay; ``spread``: the adds an address may take on each
    of several copies; ``pair_sample``: the second sample's indices where copies are
    allowed (0: none; else a power of two, at least ``NARROW_SAMPLE``); ``hot``: the most
    hot rows (a power of two, at least ``NARROW_SAMPLE // hot_min``; 0: none); ``hot_adds``: the
    adds on each copy over which a row is hot; ``state``: int32, ``state_numel(hot)``
    entries on the device to hold the plan (copies, error, hot rows, the hot rows, then
    the programs done with ``half_adds`` and the planner's copy of its first sample), for
    a caller that reads it; ``pdl``: launch ``_scatter`` and ``_sum`` as
    programmatic dependents of the launch before each where the GPU has it (False:
    never); ``half_adds``: fp16/bf16 values and output, one copy: add in the
    output's dtype straight into it (no fp32 copy and no ``_sum``; hot rows still summed in
    fp32); ``local``: sum the rows of a block that share an index with ``local - 1`` others
    or more and add each sum once (0: never; rows of over 32 elements, whose blocks hold at
    most ``LOCAL_SUB`` rows); ``columns``: the most columns of a row a ``_scatter`` block
    holds (a power of two; 0: the whole row), its blocks holding more rows instead;
    ``warps``: of a ``_scatter`` program (0: ``ROW_BLOCKS``'s or ``VALUE_BLOCKS``');
    ``own_adds``: fp16/bf16 values and output, one copy, not ``half_adds``: where the plan
    finds no hot row and at most this many adds an address, add in the output's dtype
    straight into it (``_sum`` then does nothing), else through the fp32 copy (0: always);
    ``sum_early``: with ``pdl``, ``_sum`` returns without waiting for ``_scatter`` where the
    plan left it nothing to do; ``local_early``: with ``local`` and no hot rows, a block's
    rows that share an index are found before ``_scatter`` waits for ``_init``;
    ``wait_first``: with ``pdl``, ``_init`` too is a programmatic dependent of the launch
    before it (it waits for it before reading anything; False: a plain launch);
    ``replay``: a list that receives this call's replay (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, DTYPES, "narrow_index_add")
    H = max(1, hot)
    if state is not None and state.numel() < state_numel(hot):
        raise ValueError(f"narrow_index_add: state holds {state.numel()} entries, needs "
                         f"{state_numel(hot)} (hot={hot})")
    out = torch.empty_like(self)
    plane = rows * D
    if plane == 0:
        _launches(rows, n, D, self.dtype, values.dtype, partitions, per_address, min_copies,
                  hot, hot_min, hot_adds, False, spread, pair_sample, half_adds, local,
                  columns, warps, own_adds, sum_early, local_early, wait_first, 1)  # checks
        return out
    same = out.dtype in SUMMED_IN_ACC
    acc = out if same or half_adds else torch.empty(plane, device=self.device,
                                                  dtype=torch.float32)
    HD = next_pow2(H * D) if half_adds else 1  # the hot rows' fp32 sums
    # the extra copies: zero on entry, and _sum leaves them zero (int32 zeros: fp32's bits)
    extra = zeroed(self.device, (partitions - 1) * plane).view(acc.dtype) \
        if partitions > 1 else torch.empty(HD, device=self.device, dtype=torch.float32)
    if state is None:
        state = torch.empty(state_numel(hot), device=self.device, dtype=torch.int32)
    init, scatter, total = _launches(
        rows, n, D, self.dtype, values.dtype, partitions, per_address, min_copies, hot,
        hot_min, hot_adds, pdl and has_pdl(self.device), spread, pair_sample, half_adds,
        local, columns, warps, own_adds, sum_early, local_early, wait_first,
        row_alignment(D * acc.element_size(), acc, extra) if partitions > 1 else 1)
    init(self, acc, extra, index, state, n, rows, plane, out)
    if scatter is not None:
        scatter(acc, extra, index, values, state, n, rows, plane, out)
    if total is not None:
        total(acc, extra, out, state, plane)
    if replay is not None:
        go = replay_call(
            (init, (self, acc, extra, index, state, n, rows, plane, out)),
            (scatter, (acc, extra, index, values, state, n, rows, plane, out)),
            (total, (acc, extra, out, state, plane)))
        if go is not None:
            replay.append(_replay(go, n, rows, plane, 0 if same or half_adds else plane,
                                  (partitions - 1) * plane if partitions > 1 else 0, HD,
                                  state.numel(), acc.dtype))
    return out


def _replay(go, n: int, rows: int, plane: int, acc_n: int, extra_n: int, hd: int,
            state_n: int, acc_dtype: torch.dtype):
    """``narrow_index_add`` of one shape again (see ``replay``): ``acc_n`` fp32 elements
    of ``acc`` (0: the output is ``acc``), ``extra_n`` of the zeroed copies, in
    ``acc_dtype`` (0: ``hd`` of fp32 side buffer)."""
    init, scatter, total = go
    f32, i32 = torch.float32, torch.int32

    def again(self, index, values):
        dev = self.device
        out = torch.empty_like(self)
        acc = torch.empty(acc_n, device=dev, dtype=f32) if acc_n else out
        extra = zeroed(dev, extra_n).view(acc_dtype) if extra_n else \
            torch.empty(hd, device=dev, dtype=f32)
        state = torch.empty(state_n, device=dev, dtype=i32)
        init(self, acc, extra, index, state, n, rows, plane, out)
        if scatter is not None:
            scatter(acc, extra, index, values, state, n, rows, plane, out)
        if total is not None:
            total(acc, extra, out, state, plane)
        return out

    return again


@functools.lru_cache(maxsize=1024)
def _launches(rows: int, n: int, D: int, out_dtype: torch.dtype, dtype: torch.dtype,
              partitions: int, per_address: int, min_copies: int, hot: int, hot_min: int,
              hot_adds: int, pdl: bool, spread: int, pair_sample: int, half_adds: bool,
              local: int, columns: int, warps: int, own_adds: int, sum_early: bool,
              local_early: bool, wait_first: bool, align: int) -> tuple:
    """``narrow_index_add``'s three launches for one shape and set of options (``pdl``:
    asked for and on a GPU that has it; ``align``: ``row_alignment`` of the copies), each
    ``Launcher.prepare``'d (``_scatter`` and ``_sum`` None where they do not run), after
    checking the options. Cached: a call of a shape seen before computes none of it."""
    if hot and NARROW_SAMPLE // hot_min > hot:
        raise ValueError(f"narrow_index_add: hot={hot} rows cannot hold every row that takes "
                         f"hot_min={hot_min} of {NARROW_SAMPLE} samples")
    if pair_sample and (pair_sample < NARROW_SAMPLE or pair_sample & (pair_sample - 1)):
        raise ValueError(f"narrow_index_add: pair_sample={pair_sample} must be 0 or a power of "
                         f"two of at least {NARROW_SAMPLE}")
    if D > ONE_COPY_ROW or rows >= 1 << 31:
        raise ValueError(f"narrow_index_add takes rows of at most {ONE_COPY_ROW} elements and "
                         f"fewer than 2**31 rows, got {rows} rows of {D}")
    if half_adds and (partitions != 1 or out_dtype == torch.float32 or dtype != out_dtype):
        raise ValueError(f"narrow_index_add: half_adds takes fp16/bf16 values into an output of "
                         f"their dtype, one copy; got {dtype} into {out_dtype}, "
                         f"{partitions} copies")
    if own_adds and (partitions != 1 or half_adds or local or out_dtype == torch.float32 or
                     dtype != out_dtype):
        raise ValueError(f"narrow_index_add: own_adds takes fp16/bf16 values into an output of "
                         f"their dtype, one copy, without half_adds or local; got "
                         f"{dtype} into {out_dtype}, {partitions} copies")
    ints = dtype == torch.int32
    if ints and (out_dtype != dtype or half_adds or own_adds or local):
        raise ValueError(f"narrow_index_add takes int32 values into an int32 output, without "
                         f"half_adds, own_adds or local; got {dtype} into {out_dtype}")
    if columns and (columns < 16 or columns & (columns - 1)):
        raise ValueError(f"narrow_index_add: columns={columns} must be 0 or a power of two of "
                         "at least 16")
    H = max(1, hot)
    wide_ints = ints and D > NARROW_ROW
    columns = columns or (INT_COLUMNS if wide_ints else 0)
    DP = min(next_pow2(D), columns) if columns else next_pow2(D)
    if ints:
        step, iters, nw = INT_THREAD_BLOCKS if wide_ints or \
            INT_THREAD_ROWS[0] <= D <= INT_THREAD_ROWS[1] else INT_BLOCKS
    else:
        step, iters, nw = ROW_BLOCKS if D >= ROW_BLOCKS_FROM else VALUE_BLOCKS
    warps = warps or nw
    sub = max(16, step // DP)
    if local and (local < 2 or sub > LOCAL_SUB):
        raise ValueError(f"narrow_index_add: local={local} must be 0, or at least 2 on rows of "
                         f"over {ROW_BLOCKS[0] // (2 * LOCAL_SUB)} elements (blocks of at most "
                         f"{LOCAL_SUB} rows; got rows of {D}, columns={columns})")
    plane = rows * D
    same = out_dtype in SUMMED_IN_ACC
    HD = next_pow2(H * D) if half_adds else 1
    # the sample: NARROW_SAMPLE indices, and where copies are allowed a second one
    W = 2 * pair_sample if partitions > 1 and pair_sample else NARROW_SAMPLE
    plan = dict(P=partitions, S=NARROW_SAMPLE, W=W, H=H,
                HOT_MIN=hot_min if hot else 1 << 30, HOT_ADDS=hot_adds, HOT_SHARE=HOT_SHARE,
                PER_ADDRESS=per_address, SPREAD=spread,
                MIN_COPIES=min(min_copies, partitions))
    wide = max(n * D, partitions * plane) >= 1 << 31
    blk = HALF_BLOCK if half_adds else BLOCK
    # wait_first: 0.3-0.6 µs a call faster on one H200, alone and in a compiled graph, once
    # _scatter stopped letting it launch early where no _sum follows (it then ran up to 2 µs
    # slower) (benchmarks/results/probe_init_pdl_NVIDIA_H200.json, 88639d1;
    # docs/decisions/2026-11-30-scatter-kernels-first-launch-programmatic-dependent.md)
    init = run_init.prepare((1 + cdiv(plane, blk),),
                            INIT_WARPS_ONE if W == NARROW_SAMPLE and plane < ONE_SAMPLE_PLANE
                            else INIT_WARPS, pdl and wait_first, **plan, BLOCK=blk, WIDE=wide,
                            PDL=pdl, HALF_ADDS=half_adds, HD=HD, OWN_ADDS=own_adds,
                            WAIT=pdl and wait_first)
    # ... only where _sum may have nothing to do (fp32 output, or the plan's own dtype)
    has_sum = partitions > 1 or not (same or half_adds)
    early = pdl and sum_early and n > 0 and has_sum and (same or own_adds > 0)
    # no hot row looked for only with local_early: fp32 blocks of 128 columns on 2 warps ran
    # about 1 µs slower without the (empty) hot-row loop in the grids at 518175c and
    # 3c5ebb3, on 1 warp (into 8 rows) 0.8 µs faster at 9851a2e
    # (docs/decisions/2026-11-28-scatter-blocks-plan-themselves-measured-dropped.md)
    local_early = local_early and local > 0 and hot == 0
    scatter = total = None
    if n:
        grid = (cdiv(n, sub * iters), cdiv(D, DP))
        # a row's column blocks next to each other in launch order where the rows' programs
        # fit axis 1 (docs/decisions/2026-11-27-scatter-block-local-sums-take-fp32.md:
        # skewed rows of 1024 up to 1.18x faster)
        cols_first = grid[1] > 1 and grid[0] <= MAX_GRID_Y
        if cols_first:
            grid = grid[::-1]
        launcher = run_int_scatter if ints else run_scatter
        scatter = launcher.prepare(grid, warps, pdl, D=D, DP=DP, SUB=sub, ITERS=iters,
                                      P=partitions, WIDE=wide, PDL=pdl, HALF_ADDS=half_adds,
                                      H=H, LOCAL=local, COLS_FIRST=cols_first,
                                      OWN=own_adds > 0, EARLY=early,
                                      LOCAL_EARLY=local_early, TRIGGER=has_sum, ALIGN=align,
                                      INT=ints)
    if has_sum:
        # up to SUM_COPIES copies a step: a plane of a few thousand elements still has
        # enough programs and loads in flight
        cp = min(partitions, SUM_COPIES)
        blk = BLOCK if partitions == 1 else max(64, SUM_TILE // cp)
        total = run_sum.prepare((min(cdiv(plane, blk), SUM_PROGRAMS),), 4, pdl, SAME=same,
                                BLOCK=blk, CP=cp, PDL=pdl, FIT=SUM_FIT if cp > SUM_FIT else 0,
                                OWN=4 + H if own_adds else 0, EARLY=early, INT=ints)
    return init, scatter, total
