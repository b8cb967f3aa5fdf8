"""Triton kernels behind ``commrt::partitioned_index_put`` on CUDA.

Three launches (four with hot rows, below), no host sync:

1. ``_prepare``: program 0 estimates contention from a strided sample of the indices
   (the share of equal pairs between ``SAMPLE`` indices and ``SHIFTS`` shifts of them;
   ``OWN_SAMPLE`` and ``OWN_SHIFTS`` with ``OWN_ADDS``; at least ``1 / rows``, the share
   of indices spread evenly over the rows) and
   picks ``p``: 1 (plain atomics) where the expected atomic adds per address (after
   combining, below) stay under ``PER_ADDRESS``, else the power of two (``MIN_COPIES`` to
   ``P``) that brings them under, and stores it on the device; every other program copies
   a block of ``self`` into copy 0 (in fp32: the output itself when that is fp32 and its
   rows start on 16 bytes; else every copy's rows are ``copy_stride`` elements apart, so
   that the adds go four fp32 an atomic). The ``p - 1`` extra copies are
   ``scatter_scratch``'s, zero on entry.
2. ``_scatter``: a program takes ``R`` value rows. When the sample says that one copy
   would take over ``PER_ADDRESS`` adds an address, and at most ``LEADERS`` distinct
   indices occur among the rows, it first sums the rows that share an index (a 0/1 matrix
   times the rows, on tensor cores: fp32 values as two tf32 parts, each within 2^-22 of
   itself; fp16/bf16 values in their own dtype, exact)
   and adds one row per distinct index (an infinity or NaN is left out of the product,
   where 0 * inf would reach every row, and added by its own row); otherwise it adds
   every row. Row ``j`` of program ``b`` goes to copy ``(b + j) % p``. On sm90+ it is
   launched as a programmatic dependent of ``_prepare``: its indices load while program 0
   still plans; and ``_sum`` as one of it.
3. ``_sum`` (a no-op where copy 0 is the output and ``p == 1``): the output := sum of the
   ``p`` copies, in the output's dtype, leaving the extra copies zero; an index out of
   range poisons it with NaN (the plain op would raise a device-side assert). Where the
   output is fp32, ``_scatter``'s programs let it launch once they have seen the plan, it
   returns without waiting where ``p == 1``, and ``_scatter`` poisons copy 0 itself.

With ``hot`` rows (``scatter_rule.wide_hot``) ``_prepare``'s program 0 also reads a strided
sample of ``WIDE_HOT_SAMPLE`` indices; where it holds at most ``hot`` distinct rows (hashed
into 128 bins first, a quick no where they fill more than ``hot + 1``), it lists them in
the state (told apart a reduction a row) and takes one copy,
``_hot`` (launched after ``_prepare``) sums each program's share of the values of those
rows as one-hot products into a ``[hot, columns]`` partial that it adds once (and, in a
second pass, any of its rows that the sample did not hold), and ``_scatter`` does
nothing.

With ``OWN_ADDS`` (fp16/bf16 values and output) ``_prepare`` copies ``self`` into the
output as well, and where the plan expects at most ``OWN_ADDS`` adds an address
``_scatter`` adds the values in their dtype straight into it (as Inductor's scatter does)
and ``_sum`` does nothing; elsewhere the fp32 copies as above.
"""

import functools
import math

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl, sm_count
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_rule import (
    BLOCK_ROWS,
    LEADERS,
    MIN_COPIES,
    OWN_SAMPLE,
    OWN_SHIFTS,
    PER_ADDRESS,
    SAMPLE,
    SHIFTS,
    WIDE_HOT_SAMPLE,
)
from .scatter_scratch import zeroed

HOT_AT = tl.constexpr(4)  # state[HOT_AT]: the hot rows' count (0: none), then the rows
# the hot plan's hash of a row into 128 bins: bits 25..31 of row * 2**32 / golden ratio
# (Fibonacci hashing: rows next to each other fall in different bins)
HOT_HASH, HOT_SHIFT = tl.constexpr(2654435761), tl.constexpr(25)


def hot_bin(row: int) -> int:
    """The bin of ``row`` (of 128) in the hot plan's quick check (``_few_bins``)."""
    return ((row * HOT_HASH.value) >> HOT_SHIFT.value) & 127


@triton.jit
def _bit_or(a, b):
    return a | b


@triton.jit
def _few_bins(s, HOT: tl.constexpr):
    """Whether the rows ``s`` fill at most ``HOT + 1`` of 128 bins (``hot_bin``): false
    only where they hold more than ``HOT`` distinct rows and one other value. Two
    reductions, where telling the rows apart takes ``HOT``: the plan's quick no."""
    h = ((s.to(tl.int64) * HOT_HASH) >> HOT_SHIFT) & 127
    bit = (h * 0 + 1) << (h & 63)
    lo = tl.reduce(tl.where(h < 64, bit, 0), 0, _bit_or)
    hi = tl.reduce(tl.where(h >= 64, bit, 0), 0, _bit_or)
    j = tl.arange(0, 64).to(tl.int64)
    return tl.sum(((lo >> j) & 1) + ((hi >> j) & 1)) <= HOT + 1


@triton.jit
def _hot_plan(idx, state, n, rows, HOT: tl.constexpr, S: tl.constexpr):
    """Where ``S`` strided indices hold at most ``HOT`` distinct rows (in range), store
    them in ascending order at ``state + HOT_AT + 1`` (-1 after the last) and their count at
    ``state + HOT_AT``; else store 0 there. Returns the count stored. The rows are told
    apart by ``HOT`` reductions, each the next row up (a sort of the sample instead:
    measured, dropped; docs/decisions/2026-12-06-scatter-hot-rows-stay-32-unsorted.md)."""
    step = tl.maximum(n // S, 1)
    pos = tl.arange(0, S)
    valid = pos * step < n
    s = tl.load(idx + pos * step, mask=valid, other=0)
    s = tl.where(s < 0, s + rows, s)
    s = tl.where(valid & (s >= 0) & (s < rows), s, rows)  # rows: none
    count = tl.full([], 0, tl.int32)
    if _few_bins(s, HOT):  # else more than HOT rows: no list
        last = tl.min(s) - 1
        for h in tl.static_range(HOT):  # the next distinct row, HOT times
            m = tl.min(tl.where(s > last, s, rows))
            tl.store(state + HOT_AT + 1 + h, tl.where(m < rows, m, -1).to(tl.int32))
            count += (m < rows).to(tl.int32)
            last = tl.where(m < rows, m, last)
        held = tl.max(((s > last) & (s < rows)).to(tl.int32)) == 0
        count = tl.where(held & (n > 0), count, 0)
    tl.store(state + HOT_AT, count)
    return count


@triton.jit
def _prepare(self_ptr, acc, idx, state, n, rows, plane, P: tl.constexpr,
             SAMPLE: tl.constexpr, SHIFTS: tl.constexpr, PER_ADDRESS: tl.constexpr,
             MIN_COPIES: tl.constexpr, R: tl.constexpr, LEADERS: tl.constexpr,
             BLOCK: tl.constexpr, PDL: tl.constexpr, OWN: tl.constexpr = 0, out=None,
             WAIT: tl.constexpr = False, HOT: tl.constexpr = 0,
             HOT_SAMPLE: tl.constexpr = 0, D: tl.constexpr = 1, S: tl.constexpr = 1):
    # Program 0 estimates p, every other program copies a block of self into acc (fp32).
    # OWN > 0 (fp16/bf16): self is copied into out too, and the plan adds in out's dtype
    # (state[3] = 1) where an address expects at most OWN adds. WAIT: launched as a
    # programmatic dependent of the launch before it, whose results it waits for first.
    # HOT > 0: where HOT_SAMPLE strided indices hold at most HOT distinct rows, those rows
    # go to state[HOT_AT + 1 ...] and their count to state[HOT_AT] (else 0), for _hot, and
    # the plan takes one copy. S != D: acc's rows are S elements apart, self's (and out's)
    # D; plane counts acc's elements (padding: zeros).
    if WAIT:
        tl.extra.cuda.gdc_wait()
    if PDL:  # _scatter's programs may start (they load their indices, then wait)
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    if pid > 0:
        offs = (pid - 1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        src, m = _unpadded(offs, plane, D, S)
        x = tl.load(self_ptr + src, mask=m, other=0)
        tl.store(acc + offs, x.to(tl.float32), mask=offs < plane)
        if OWN > 0:
            tl.store(out + src, x, mask=m)
    else:
        # The chance that two indices share a row: equal pairs among SAMPLE strided indices
        # and the same sample shifted by SHIFTS spread offsets (spread, so that sorted
        # indices count as what they are). No matrix: loads of one sample, elementwise
        # compares.
        step = tl.maximum(n // SAMPLE, 1)
        pos = tl.arange(0, SAMPLE)
        valid = pos * step < n
        a = tl.load(idx + pos * step, mask=valid, other=0)
        a = tl.where(a < 0, a + rows, a)
        equal = tl.zeros([SAMPLE], tl.int32)
        pairs = tl.zeros([SAMPLE], tl.int32)
        for s in tl.static_range(SHIFTS):
            q = (pos + 1 + s * (SAMPLE // (2 * SHIFTS))) % SAMPLE
            both = valid & (q * step < n)
            b = tl.load(idx + q * step, mask=both, other=0)  # the sample's lines: cached
            b = tl.where(b < 0, b + rows, b)
            equal += (both & (a == b)).to(tl.int32)
            pairs += both.to(tl.int32)
        share = tl.sum(equal).to(tl.float32) / tl.maximum(tl.sum(pairs), 1).to(tl.float32)
        # ... and no less than over `rows` rows evenly, so that a sample with no equal
        # pair does not read as no contention where every row takes many values: 1M
        # uniform indices into 501 rows (bench_scatter.py, k = 500) read as one copy
        # (2,000 adds an address), 222 µs against 191 where adfac6a's plan, with four
        # times the pairs, chose 16 (benchmarks/results/probe_scatter_forms_NVIDIA_H200.json)
        share = tl.maximum(share, 1.0 / rows)
        # Atomic adds an address expects, seen from an add: n * share adding every row (n
        # / d for d rows drawn uniformly); combining, one per program of R rows that holds
        # the index, (n / R) * (1 - (1 - 1/d)**R), where a program expects at most LEADERS
        # distinct indices.
        adds = n * share
        contended = adds > PER_ADDRESS  # programs combine rows only then
        if OWN > 0:
            tl.store(state + 3, (adds <= OWN).to(tl.int32))
        if LEADERS >= 0:
            d = 1.0 / tl.maximum(share, 1e-6)
            hit = 1.0 - tl.exp(R * tl.log(tl.maximum(1.0 - 1.0 / d, 1e-30)))
            if d * hit <= LEADERS:
                adds = (n / R) * hit
        p = MIN_COPIES
        while (p * PER_ADDRESS < adds) & (p < P):
            p *= 2
        if adds <= PER_ADDRESS:  # one copy takes it: plain atomics
            p = 1
        if HOT > 0:
            if _hot_plan(idx, state, n, rows, HOT, HOT_SAMPLE) > 0:
                p = 1  # _hot adds a partial a program, and the rows no sample held
        tl.store(state, p)
        tl.store(state + 1, 0)
        tl.store(state + 2, contended.to(tl.int32))


@triton.jit
def _unpadded(offs, plane, D: tl.constexpr, S: tl.constexpr):
    """(offset in rows of ``D`` elements, whether it holds one) of the elements ``offs``
    (under ``plane``) of rows ``S`` elements apart (``S >= D``; the same where equal)."""
    if S == D:
        return offs, offs < plane
    row = offs // S
    col = offs - row * S
    return row * D + col, (offs < plane) & (col < D)


@triton.jit
def poison(ptr, plane):
    """NaN into the ``plane`` elements at ``ptr``: NaN plus anything added before or after
    is NaN (an index out of range, where the plain op raises a device-side assert)."""
    for start in range(0, plane, 1024):
        offs = start + tl.arange(0, 1024)
        tl.store(ptr + offs, tl.full([1024], float("nan"), ptr.dtype.element_ty),
                 mask=offs < plane)


@triton.jit
def _tf32(x):
    # x with its mantissa cut to tf32's 10 bits: exact on tensor cores
    return (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _tf32_near(x):
    # x rounded to tf32's 10 mantissa bits (half away from zero)
    return ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32,
                                                                      bitcast=True)


@triton.jit
def _add_in_parts(acc, onehot, v, PARTS: tl.constexpr):
    # acc + onehot @ v on tensor cores, v in PARTS tf32 values (10 + 1 mantissa bits each):
    # PARTS = 2 (fp32), v1 + v2, v2 the rest rounded to tf32 (each value within 2^-22 of
    # itself, unbiased); 1, fp16 and bf16 values (exact)
    tl.static_assert(PARTS == 1 or PARTS == 2, "one or two tf32 parts a value")
    v1 = _tf32(v)
    acc = tl.dot(onehot, v1, acc, input_precision="tf32")
    if PARTS > 1:
        acc = tl.dot(onehot, _tf32_near(v - v1), acc, input_precision="tf32")
    return acc


@triton.jit
def _wrapped(i, rm, rows):
    """(indices ``i`` with negative ones counted from the end, out of range where ``rm``)."""
    i = tl.where(i < 0, i + rows, i)
    return i, rm & ((i < 0) | (i >= rows))


@triton.jit
def _rows_of(idx, r, n, rows, WIDE: tl.constexpr):
    """(output row, in range, out of range) of value rows ``r``: negative indices count
    from the end; rows are int32 unless WIDE."""
    rm = r < n
    i, bad = _wrapped(tl.load(idx + r, mask=rm, other=0), rm, rows)
    if not WIDE:
        i = i.to(tl.int32)  # the rows in range fit
    return i, rm & (bad == 0), bad


@triton.jit
def _scatter(acc, extra, idx, vals, state, n, rows, D: tl.constexpr, R: tl.constexpr,
             BD: tl.constexpr, LEADERS: tl.constexpr, PARTS: tl.constexpr,
             WIDE: tl.constexpr, PDL: tl.constexpr, TRIGGER: tl.constexpr = False,
             EARLY: tl.constexpr = False, OWN: tl.constexpr = False, out=None,
             ALIGN: tl.constexpr = 1, HALF: tl.constexpr = False, HOT: tl.constexpr = False,
             S: tl.constexpr = 0):
    # HOT: nothing to do where the plan found hot rows (_hot, launched before, added every
    # row); else as _rows (S: the copies' rows' stride, 0: D)
    go = True
    if HOT:
        if PDL:
            tl.extra.cuda.gdc_wait()
        go = tl.load(state + HOT_AT) == 0
    if go:
        _rows(acc, extra, idx, vals, state, n, rows, D, R, BD, LEADERS, PARTS, WIDE, PDL,
              TRIGGER, EARLY, OWN, out, ALIGN, HALF, D if S == 0 else S)


@triton.jit
def _rows(acc, extra, idx, vals, state, n, rows, D: tl.constexpr, R: tl.constexpr,
          BD: tl.constexpr, LEADERS: tl.constexpr, PARTS: tl.constexpr, WIDE: tl.constexpr,
          PDL: tl.constexpr, TRIGGER: tl.constexpr, EARLY: tl.constexpr, OWN: tl.constexpr,
          out, ALIGN: tl.constexpr, HALF: tl.constexpr, S: tl.constexpr):
    # D is a compile-time constant; offsets are int32 unless an operand holds 2**31 elements
    # or more (WIDE). LEADERS < 0: never combine. PDL: launched while _prepare runs; the
    # indices load (written before it) before waiting for it, the values after
    # (docs/decisions/2026-11-28-scatter-bf16-index-put-wide-rows.md: before, uniform
    # indices ran slower). TRIGGER: _sum, a programmatic dependent, may launch once every
    # program has started (EARLY: once every program has seen the plan, and an index out of
    # range poisons acc here, and out with OWN). OWN: where the plan says so (state[3]), add
    # into out in its fp16/bf16 dtype instead (the plan then chose one copy, no combining).
    # ALIGN: the bytes every row of acc and extra starts on (row_alignment). HALF (fp16/bf16
    # values): rows combine as products in the values' dtype, not in PARTS tf32 parts.
    # S: the elements between rows of acc and extra (D, or D padded so that rows of any
    # width start on 16 bytes: padding columns take zeros, in the same vector atomics).
    if TRIGGER and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    j = tl.arange(0, R)
    r = pid * R + j
    if WIDE:
        r = r.to(tl.int64)
    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
    # same[a, b]: rows a and b add to one output row; first: the first row of each
    same = (i[:, None] == i[None, :]) & ok[:, None] & ok[None, :]
    first = ok & (tl.max((same & (j[None, :] < j[:, None])).to(tl.int32), axis=1) == 0)
    if PDL:
        tl.extra.cuda.gdc_wait()
    if TRIGGER and EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(state + 1 + 0 * r, 1, mask=bad)
    if EARLY or OWN:  # else _sum poisons out (with OWN it may not run)
        if tl.max(bad.to(tl.int32)) > 0:
            poison(acc, rows * S)
            if OWN:
                poison(out, rows * D)
    own = False
    if OWN:
        own = tl.load(state + 3) != 0
    part = (pid + j) & (tl.load(state) - 1)  # p is a power of two
    dst = tl.multiple_of(tl.where(part == 0, acc + i * S, extra + ((part - 1) * rows + i) * S),
                         ALIGN)
    combine = False  # LEADERS < 0: never (the row sums are not even traced, below)
    if LEADERS >= 0:
        combine = (tl.load(state + 2) != 0) & (tl.sum(first.to(tl.int32)) <= LEADERS)
    for c0 in range(0, D, BD):
        c = c0 + tl.arange(0, BD)
        cm = c < D
        cs = c < S  # the adds: a padding column takes a zero (range(0, D, BD) reaches S)
        vn = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < n)[:, None] & cm[None, :],
                     other=0)  # not waiting for the indices
        v = vn.to(tl.float32)
        if own:
            tl.atomic_add(out + (i * D)[:, None] + c[None, :], vn,
                          mask=ok[:, None] & cm[None, :], sem="relaxed")
        elif combine:
            if LEADERS >= 0:  # traced only where rows may combine (tl.dot: R >= 16)
                # the product takes finite values only (0 * inf is NaN in every row of the
                # column); each row adds its infinities and NaNs itself, as torch would
                fin = tl.abs(v) < float("inf")
                onehot = tl.where(same, 1.0, 0.0)
                if HALF:  # fp16/bf16: products in their own dtype (exact), fp32 sums
                    s = tl.dot(onehot.to(vn.dtype), tl.where(fin, vn, 0.0).to(vn.dtype))
                else:
                    s = _add_in_parts(tl.zeros([R, BD], tl.float32), onehot,
                                      tl.where(fin, v, 0.0), PARTS)
                tl.atomic_add(dst[:, None] + c[None, :], s,
                              mask=first[:, None] & cs[None, :], sem="relaxed")
                tl.atomic_add(dst[:, None] + c[None, :], v,
                              mask=ok[:, None] & cm[None, :] & (fin == 0), sem="relaxed")
        else:
            tl.atomic_add(dst[:, None] + c[None, :], v,
                          mask=ok[:, None] & cs[None, :], sem="relaxed")


@triton.jit
def _hot(acc, idx, vals, state, n, rows, chunk, D: tl.constexpr, H: tl.constexpr,
         SUB: tl.constexpr, BD: tl.constexpr, PARTS: tl.constexpr, HALF: tl.constexpr,
         WIDE: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr, S: tl.constexpr):
    # Where the plan found hot rows (state[HOT_AT] > 0; else nothing): program g sums its
    # chunk of value rows into a [H, BD] partial of the hot rows (one-hot products, as the
    # combined rows in _scatter) and adds it to acc (the one copy the plan then chose;
    # rows S apart); where its chunk held rows of no hot row (the hot rows' hits,
    # counted, fall short), a second pass adds those with atomics. An infinity or NaN makes
    # its column NaN in every row of a product (0 * inf): where the partial is not finite,
    # the chunk is summed again a hot row at a time. An index out of range sets state[1]
    # (and with EARLY poisons acc: _sum may not run). PDL: launched while _prepare runs.
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()  # _scatter waits for this grid to finish
    nh = tl.load(state + HOT_AT)
    if nh > 0:
        hh = tl.arange(0, H)
        hot = tl.load(state + HOT_AT + 1 + hh, mask=hh < nh, other=-1)
        c = tl.program_id(1) * BD + tl.arange(0, BD)
        cm = c < D
        lo = tl.program_id(0) * chunk
        if WIDE:
            lo = lo.to(tl.int64)
        hi = tl.minimum(lo + chunk, n)
        s = tl.zeros([H, BD], tl.float32)
        bad_any = tl.zeros([SUB], tl.int32)
        hits = tl.zeros([H, SUB], tl.int32)  # counts, no reduction a step
        held = tl.zeros([SUB], tl.int32)
        for start in range(lo, hi, SUB):
            r = start + tl.arange(0, SUB)
            i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
            bad_any |= bad.to(tl.int32)
            hit = (hot[:, None] == i[None, :]) & ok[None, :]
            hits += hit.to(tl.int32)
            held += ok.to(tl.int32)
            vn = tl.load(vals + r[:, None] * D + c[None, :],
                         mask=(r < hi)[:, None] & cm[None, :], other=0)
            onehot = tl.where(hit, 1.0, 0.0)
            # each step's sums added to s in fp32, not accumulated in the product: a
            # tensor core's accumulator keeps fewer bits, and errors grew with the chunk
            if HALF:  # fp16/bf16: products in their own dtype (exact), fp32 sums
                s += tl.dot(onehot.to(vn.dtype), vn)
            else:
                s += _add_in_parts(tl.zeros([H, BD], tl.float32), onehot, vn.to(tl.float32),
                                   PARTS)
        if tl.max(bad_any) > 0:
            tl.store(state + 1, 1)
            if EARLY:
                poison(acc, rows * S)
        else:
            if tl.max(((tl.abs(s) == float("inf")) | (s != s)).to(tl.int32)) > 0:
                s = _hot_sums(idx, vals, hot, lo, hi, rows, c, cm, D, H, SUB, BD, WIDE)
            if tl.sum(hits) < tl.sum(held):  # rows of no hot row: a second pass adds them
                _cold_rows(acc, idx, vals, hot, lo, hi, rows, c, cm, D, SUB, WIDE, S)
        tl.atomic_add(acc + (hot * S)[:, None] + c[None, :], s,
                      mask=(hot >= 0)[:, None] & (c < S)[None, :], sem="relaxed")


@triton.jit
def _cold_rows(acc, idx, vals, hot, lo, hi, rows, c, cm, D: tl.constexpr, SUB: tl.constexpr,
               WIDE: tl.constexpr, S: tl.constexpr):
    # the value rows lo..hi of no hot row, added with atomics to acc (rows S apart; _hot's
    # rare way out)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)
        i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
        cold = ok & (tl.max((hot[:, None] == i[None, :]).to(tl.int32), axis=0) == 0)
        m = cold[:, None] & cm[None, :]
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0)
        tl.atomic_add(acc + (i * S)[:, None] + c[None, :], v.to(tl.float32), mask=m,
                      sem="relaxed")


@triton.jit
def _hot_sums(idx, vals, hot, lo, hi, rows, c, cm, D: tl.constexpr, H: tl.constexpr,
              SUB: tl.constexpr, BD: tl.constexpr, WIDE: tl.constexpr):
    """[H, BD] sums of the value rows lo..hi into each hot row, a hot row at a time in
    fp32 (_hot's rare way out, in few registers)."""
    hh = tl.arange(0, H)
    s = tl.zeros([H, BD], tl.float32)
    for h in range(0, H):
        row = tl.sum(tl.where(hh == h, hot, 0))
        t = tl.zeros([SUB, BD], tl.float32)
        for start in range(lo, hi, SUB):
            r = start + tl.arange(0, SUB)
            i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
            v = tl.load(vals + r[:, None] * D + c[None, :],
                        mask=(ok & (i == row))[:, None] & cm[None, :], other=0)
            t += v.to(tl.float32)
        s = tl.where(hh[:, None] == h, tl.sum(t, axis=0)[None, :], s)
    return s


@triton.jit
def _copies(extra, plane, offs, m, c0, p, T: tl.constexpr, BLOCK: tl.constexpr):
    # the sum of extra copies c0 .. c0 + T - 1 (those under p - 1) at offs, left zero
    c = (c0 + tl.arange(0, T)).to(tl.int64)
    at = extra + c[:, None] * plane + offs[None, :]
    cm = (c[:, None] < p - 1) & m[None, :]
    s = tl.sum(tl.load(at, mask=cm, other=0), axis=0)
    tl.store(at, tl.zeros([T, BLOCK], tl.float32), mask=cm)
    return s


@triton.jit
def _sum(acc, extra, out, state, plane, SAME: tl.constexpr, BLOCK: tl.constexpr,
         CP: tl.constexpr, PDL: tl.constexpr = False, FIT: tl.constexpr = 0,
         OWN: tl.constexpr = 0, EARLY: tl.constexpr = False, INT: tl.constexpr = False,
         D: tl.constexpr = 1, S: tl.constexpr = 1):
    # out := acc + the p - 1 extra copies (NaN where state[1] flags an index out of range);
    # nothing to do where acc is out and p == 1 (a capped grid, so that doing nothing costs
    # little). CP copies a step, so that up to 127 copies are read with enough loads in
    # flight; FIT > 0: where the plan chose at most FIT + 1 copies, they are read in one
    # [FIT, BLOCK] tile instead. The extra copies read are left zero (scatter_scratch).
    # Also the narrow kernels' last step (their state starts with p and the flag). PDL:
    # launched while _scatter runs, it waits for it before reading anything. OWN > 0:
    # nothing to do where state[OWN] says the narrow _scatter added into out. EARLY (PDL,
    # and _scatter's programs let _sum launch only once the plan is done): where the plan
    # leaves nothing to do, return without waiting for _scatter (which then poisons the
    # output itself); the stream's next launch still waits for _scatter
    # (tests/test_gpu_pdl_order.py). INT: int32 copies, summed in int32 (their _scatter
    # asserts on an index out of range: no NaN). S != D: the copies' rows are S elements
    # apart (plane counts their elements), out's D.
    go = True
    if EARLY:  # the plan is there (see above): return without waiting where it leaves nothing
        go = (tl.load(state, cache_modifier=".cg") > 1) | (not SAME)
        if OWN > 0:
            go = go & (tl.load(state + OWN, cache_modifier=".cg") == 0)
    if go:
        _sum_wait_and_add(acc, extra, out, state, plane, SAME, BLOCK, CP, PDL, FIT, OWN, INT,
                          D, S)


@triton.jit
def _sum_wait_and_add(acc, extra, out, state, plane, SAME: tl.constexpr, BLOCK: tl.constexpr,
                      CP: tl.constexpr, PDL: tl.constexpr, FIT: tl.constexpr,
                      OWN: tl.constexpr, INT: tl.constexpr, D: tl.constexpr, S: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()
    p = tl.load(state)
    bad = tl.load(state + 1) != 0
    own = 0
    if OWN > 0:
        own = tl.load(state + OWN)
    if ((p > 1) | bad | (not SAME)) & (own == 0):
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < plane
            x = tl.load(acc + offs, mask=m, other=0)
            if FIT > 0:
                if p - 1 <= FIT:
                    if p > 1:
                        x += _copies(extra, plane, offs, m, 0, p, FIT, BLOCK)
                else:
                    for c0 in range(0, p - 1, CP):
                        x += _copies(extra, plane, offs, m, c0, p, CP, BLOCK)
            else:
                for c0 in range(0, p - 1, CP):
                    x += _copies(extra, plane, offs, m, c0, p, CP, BLOCK)
            if not INT:
                x = tl.where(bad, float("nan"), x)
            to, keep = _unpadded(offs, plane, D, S)
            tl.store(out + to, x.to(out.dtype.element_ty), mask=keep)


# the launches, without Triton's per-call argument binding (symm_mem.launch)
run_prepare, run_scatter, run_sum = Launcher(_prepare), Launcher(_scatter), Launcher(_sum)
run_hot = Launcher(_hot)
SCATTER_WARPS = 4  # warps a _scatter program
SUM_PROGRAMS = 2048  # the most _sum programs (each loops over the plane)
# output elements of a _sum program's step, and copies read a step: on the seed
# benchmark's shape (1M rows of 100 into 501 rows, 128 copies) on one H200, 32 copies a
# step took _sum 20 µs against 61 with 16 and 235 with 64, steps of 64 and 128 elements
# 30 and 91 (benchmarks/results/probe_seed_ab_first_NVIDIA_H200.json, cec7f3b;
# probe_seed_ab_variants_NVIDIA_H200.json, d76bcc1)
SUM_BLOCK, SUM_CP = 256, 32
PREPARE_BLOCK = 4096  # elements of self a _prepare program copies
# _hot's launch: value bytes a step an SM, programs an SM, warps a program, and the most
# columns a program takes (the shapes compiled for 64 hot rows: probes/probe_seed_hot.py)
HOT_SM_BYTES, HOT_PROGRAMS, HOT_WARPS, HOT_COLUMNS = 65536, 2, 4, 128
INTERPRETER_SMS = 8  # SMs assumed under Triton's interpreter (the scatter kernels')
# tf32 pieces of a value in _add_in_parts. fp32 in two, not three (exact, the form before,
# in git at aa11b3b): on one H200, 4M
# values, µs (benchmarks/results/probe_few_products_parts_NVIDIA_H200.json, 8400188), rows
# of 100 into 8 rows (scatter_few) 8.13 against 8.72 uniform, 8.14 against 8.73 with a hot
# row; into 1,024 rows (the combined rows here) 17.13 against 17.77 skewed, 17.28 against
# 17.98 hot, 9.30 against 9.35 uniform; errors against float64 5.3e-7 against 7.2e-7 (the
# fp32 sums of the products), 2.2e-7 against 2.0e-7 (Inductor's scatter 1.3e-6, 1.0e-6).
PARTS = {torch.float32: 2, torch.float16: 1, torch.bfloat16: 1}


# The fp32 copies' rows start on 16 bytes (COPY_GROUP elements) whatever the width of a
# row: Triton adds four fp32 an instruction only into rows so aligned.
COPY_GROUP = 4


def copy_stride(D: int) -> int:
    """Elements between rows of the fp32 copies for rows of ``D`` values: ``D`` rounded up
    to a multiple of ``COPY_GROUP`` where it is wider than one group."""
    return D if D <= COPY_GROUP else cdiv(D, COPY_GROUP) * COPY_GROUP


def scatter_config(D: int, dtype: torch.dtype) -> dict:
    """Constexpr arguments of ``_scatter`` for rows of ``D`` values of ``dtype``."""
    return dict(D=D, R=BLOCK_ROWS, BD=max(16, min(128, next_pow2(D))),
                LEADERS=LEADERS, PARTS=PARTS[dtype])


def scatter_shape(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                  partitions: int, dtypes: tuple, name: str) -> tuple[int, int, int]:
    """(output rows, indices, elements a row) of a scatter, after checking ``partitions``
    (a power of two) and the value dtype (one of ``dtypes``)."""
    if partitions < 1 or partitions & (partitions - 1):
        raise ValueError(f"partitions must be a power of two, got {partitions}")
    if values.dtype not in dtypes:
        raise TypeError(f"{name} takes {list(dtypes)} values, got {values.dtype}")
    rows = self.shape[0]
    return rows, index.numel(), self.numel() // max(1, rows)


def row_alignment(row_bytes: int, *buffers: torch.Tensor) -> int:
    """The bytes (a power of two, at most 16) that every row of ``buffers`` starts on, for
    a kernel that picks each row's buffer with ``tl.where``: Triton loses the pointers'
    alignment there, and with it the vector atomics (4 fp32 an instruction) that it emits
    for one buffer, unless the kernel restates it (``tl.multiple_of``)."""
    return math.gcd(16, row_bytes, *(b.data_ptr() for b in buffers))


def partitioned_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                          partitions: int, per_address: int = PER_ADDRESS,
                          min_copies: int = MIN_COPIES, leaders: int = LEADERS,
                          state: torch.Tensor | None = None,
                          sum_pdl: bool = True, sum_early: bool = True,
                          own_adds: int = 0, wait_first: bool = True,
                          half_products: bool | None = None, hot: int = 0,
                          pad_rows: bool = True, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) with the scheme above.

    ``self`` and ``values`` contiguous floating tensors, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``state``: int32 ``[3]`` (``[4]`` with ``own_adds``) on the
    device to hold the plan (copies, error, whether programs may combine rows, whether they
    add in the output's dtype), for a caller that reads it; ``sum_pdl``: launch ``_sum`` as a
    programmatic dependent of ``_scatter`` where the GPU has it (False: a plain launch);
    ``sum_early``: that ``_sum`` returns without waiting where the plan left nothing to
    sum; ``own_adds``: fp16/bf16 values and output: where the plan expects at most this
    many adds an address, add in the output's dtype straight into it (``_sum`` then does
    nothing), else through the fp32 copies (0: always); ``wait_first``: ``_prepare`` a
    programmatic dependent of the launch before it, where the GPU has it (it waits for it
    before reading anything; False: a plain launch); ``half_products``: fp16/bf16 rows
    combine as products in their dtype (None: on a GPU; Triton's interpreter multiplies
    bf16 wrongly), else in tf32; ``hot``: where a sample of the indices holds at most this
    many distinct rows (a power of two, 16 or more; 0: never looked for), ``_hot`` sums
    each program's values of those rows as one-hot products into a partial it adds once,
    and ``_scatter`` does nothing; ``pad_rows``: the fp32 copies' rows ``copy_stride(D)``
    elements apart (False: ``D``); ``replay``: a list that
    receives this call's replay (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, tuple(PARTS),
                               "partitioned_index_add")
    if own_adds and (self.dtype == torch.float32 or values.dtype != self.dtype or
                     own_adds > per_address):
        raise ValueError(f"partitioned_index_add: own_adds takes fp16/bf16 values into an "
                         f"output of their dtype, at most per_address={per_address} adds; got "
                         f"{values.dtype} into {self.dtype}, own_adds={own_adds}")
    if hot and (hot < 16 or hot & (hot - 1) or own_adds):
        raise ValueError(f"partitioned_index_add: hot must be a power of two of 16 or more, "
                         f"without own_adds; got hot={hot}, own_adds={own_adds}")
    if hot and rows >= 1 << 31:
        raise ValueError(f"partitioned_index_add: hot takes outputs of under 2**31 rows; got "
                         f"{rows}")
    out = torch.empty_like(self)
    if out.numel() == 0:
        return out
    S = copy_stride(D) if pad_rows else D
    plane = rows * S  # elements of a copy
    same = out.dtype == torch.float32 and S == D
    acc = out if same else torch.empty(plane, device=self.device, dtype=torch.float32)
    # the extra copies: zero on entry, and _sum leaves them zero
    extra = zeroed(self.device, (partitions - 1) * plane)
    need = HOT_AT.value + 1 + hot if hot else 4 if own_adds else 3
    if state is None:
        state = torch.empty(need, device=self.device, dtype=torch.int32)
    elif state.numel() < need:
        raise ValueError(f"partitioned_index_add: state holds {state.numel()} entries, needs "
                         f"{need} (own_adds={own_adds}, hot={hot})")
    prepare, hots, scatter, total = _launches(
        rows, n, D, S, values.dtype, same, partitions, per_address, min_copies, leaders,
        has_pdl(self.device), sum_pdl, sum_early, own_adds, wait_first,
        row_alignment(S * 4, acc, extra),
        self.device.type == "cuda" if half_products is None else half_products, hot,
        sm_count(self.device) or INTERPRETER_SMS)
    chunk = hots[1] if hots is not None else 0
    prepare(self, acc, index, state, n, rows, plane, out)
    if hots is not None:
        hots[0](acc, index, values, state, n, rows, chunk)
    if scatter is not None:
        scatter(acc, extra, index, values, state, n, rows, out)
    total(acc, extra, out, state, plane)
    if replay is not None:
        go = replay_call((prepare, (self, acc, index, state, n, rows, plane, out)),
                         (hots and hots[0], (acc, index, values, state, n, rows, chunk)),
                         (scatter, (acc, extra, index, values, state, n, rows, out)),
                         (total, (acc, extra, out, state, plane)))
        if go is not None:
            replay.append(_replay(go, n, rows, plane, 0 if same else plane,
                                  (partitions - 1) * plane, state.numel(), chunk))
    return out


def _replay(go, n: int, rows: int, plane: int, acc_n: int, extra_n: int, state_n: int,
            chunk: int):
    """``partitioned_index_add`` of one shape again (see ``replay``): ``acc_n`` fp32
    elements of ``acc`` (0: the output is ``acc``), ``extra_n`` of the zeroed copies,
    ``chunk``: value rows a ``_hot`` program."""
    prepare, hots, scatter, total = go
    f32, i32 = torch.float32, torch.int32

    def again(self, index, values):
        dev = self.device
        out = torch.empty_like(self)
        acc = torch.empty(acc_n, device=dev, dtype=f32) if acc_n else out
        extra = zeroed(dev, extra_n)
        state = torch.empty(state_n, device=dev, dtype=i32)
        prepare(self, acc, index, state, n, rows, plane, out)
        if hots is not None:
            hots(acc, index, values, state, n, rows, chunk)
        if scatter is not None:
            scatter(acc, extra, index, values, state, n, rows, out)
        total(acc, extra, out, state, plane)
        return out

    return again


@functools.lru_cache(maxsize=1024)
def _launches(rows: int, n: int, D: int, S: int, dtype: torch.dtype, same: bool,
              partitions: int, per_address: int, min_copies: int, leaders: int, pdl: bool,
              sum_pdl: bool, sum_early: bool, own_adds: int, wait_first: bool, align: int,
              half_products: bool, hot: int, sms: int) -> tuple:
    """``partitioned_index_add``'s launches for one shape and set of options
    (``S``: the copies' row stride; ``same``: the output is copy 0; ``pdl``: the GPU has
    programmatic dependent launch; ``align``: ``row_alignment`` of the copies;
    ``half_products``: fp16/bf16 rows combine as products in their dtype; ``hot``: its;
    ``sms``: the GPU's), each ``Launcher.prepare``'d: (``_prepare``, (``_hot``, value rows
    a program) or None, ``_scatter`` (None where there are no values), ``_sum``). Cached: a
    call of a shape seen before computes none of it."""
    plane = rows * S
    cfg = dict(scatter_config(D, dtype), LEADERS=leaders)
    # wait_first: fp32 rows of 100 into 1,024 rows, uniform, 9.47 against 10.06 µs in a
    # compiled graph on one H200 (benchmarks/results/probe_init_pdl_NVIDIA_H200.json, 88639d1)
    prepare = run_prepare.prepare(
        (1 + cdiv(plane, PREPARE_BLOCK),), 4, pdl and wait_first, P=partitions,
        SAMPLE=OWN_SAMPLE if own_adds else SAMPLE, SHIFTS=OWN_SHIFTS if own_adds else SHIFTS,
        PER_ADDRESS=per_address, MIN_COPIES=min(min_copies, partitions), R=cfg["R"],
        LEADERS=leaders, BLOCK=PREPARE_BLOCK, PDL=pdl, OWN=own_adds, WAIT=pdl and wait_first,
        HOT=hot, HOT_SAMPLE=WIDE_HOT_SAMPLE, D=D, S=S)
    # _sum a programmatic dependent, as the narrow kernels' is: on one H200 every cell the
    # wide kernels take ran 0.3-0.6 µs faster so (cf70dce,
    # benchmarks/results/probe_sum_grid_NVIDIA_H200.json: fp32 rows of 100 into 1,024
    # rows, uniform, 10.9 against 11.2 µs)
    sum_pdl = pdl and sum_pdl
    # else _sum always has work
    early = sum_pdl and sum_early and (same or own_adds > 0) and n * D > 0
    scatter = None
    if n * D:
        # half_products: on one H200, bf16 rows of 100 into 1,024 rows, µs uniform / skewed /
        # hot, 7.99 / 16.19 / 16.34 against 8.16 / 16.93 / 16.95 as tf32 products; rows of 1024
        # into 8 rows 24.11 / 14.15 against 24.16 / 15.08 uniform / hot; fp32 within 0.03
        # (benchmarks/results/probe_scatter_forms_products_NVIDIA_H200.json, 97d441b)
        wide = max(n * D, partitions * plane) >= 1 << 31
        scatter = run_scatter.prepare((cdiv(n, cfg["R"]),), SCATTER_WARPS, pdl, WIDE=wide,
                                      PDL=pdl, TRIGGER=sum_pdl, EARLY=early, OWN=own_adds > 0,
                                      ALIGN=align, HALF=half_products and cfg["PARTS"] == 1,
                                      HOT=hot > 0, S=S, **cfg)
    total = run_sum.prepare((min(cdiv(plane, SUM_BLOCK), SUM_PROGRAMS),), 4, sum_pdl,
                            SAME=same, BLOCK=SUM_BLOCK, CP=SUM_CP, PDL=sum_pdl,
                            OWN=3 if own_adds else 0, EARLY=early, D=D, S=S)
    hots = None
    if hot and n * D:
        bd = max(16, min(HOT_COLUMNS, next_pow2(D)))
        sub = max(16, HOT_SM_BYTES // (HOT_PROGRAMS * bd * dtype.itemsize))
        programs = min(HOT_PROGRAMS * sms, cdiv(n, sub))
        hots = (run_hot.prepare((programs, cdiv(D, bd)), HOT_WARPS, pdl, D=D, H=hot, SUB=sub,
                                BD=bd, PARTS=cfg["PARTS"],
                                HALF=half_products and cfg["PARTS"] == 1,
                                WIDE=max(n * D, plane) >= 1 << 31, PDL=pdl, EARLY=early,
                                S=S),
                cdiv(n, programs))
    return prepare, hots, scatter, total
