"""Triton kernels for accumulating scatters of integer values (``scatter_rule.int_adds``,
``int_flat``) behind ``commrt::partitioned_index_put`` on CUDA.

torch's index_put/index_add adds int64 with a compare-and-swap loop an element, and
Inductor hands int64 scatters to torch's kernel; Triton adds them with the GPU's native
64-bit atomics (``red.add.u64``: two's complement, so the sums wrap as torch's do and
are exact). One launch, ``_int_adds``: a program adds ``SUB`` value rows, ``DP`` columns
at a time, to copy ``j % P`` of value row ``j``; with one copy (``P = 1``) that copy is
the output, a copy of ``self`` (``_int_copy``), else torch sums ``self`` and the zeroed copies after
it. An index out of range is a device-side assert, as torch's (Triton's debug is on).

``int_flat_index_add`` (the integer rows that ``scatter_rule.int_flat`` gives it) adds one
value element a thread, a program a run of ``FLAT_BLOCK`` consecutive elements (Inductor's form,
on fewer a thread), no plan: value row ``j`` to copy ``j % P``. One copy is the output, a
copy of ``self``; more are ``scatter_scratch``'s, zero on entry, and ``_int_sum``, launched
after ``_int_flat``, adds them to ``self``, leaving them zero. (As a programmatic dependent
the sum made ``_int_flat`` 20.5 µs against 13.3 on int32 rows of 100 into 1,024 rows, one
H100: ``benchmarks/results/probe_int_copies_kernels_NVIDIA_H100_80GB_HBM3.json``, e5ec0c0.)
"""

import functools

import torch
import triton
import triton.language as tl

from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_kernels import SUM_PROGRAMS, _copies, _rows_of, scatter_shape
from .scatter_rule import INT_DTYPES
from .scatter_scratch import zeroed

ELEMENTS = 2048  # value elements a program a step ([SUB, DP])
MAX_COLUMNS = 1024  # DP: columns a step
WARPS = 4
# _int_flat: value elements a program, warps (one element a thread). On one H100, int32
# rows of 100 and 1024 into 1,024 rows, uniform, 256 on 8 warps took 13.2 and 13.9 µs on
# one copy against 29.2 and 27.6 for _int_adds' [SUB, DP] blocks and 29.9 and 15.4 for
# Inductor's plain scatter; 512 on 4 warps 30.0 and 27.4
# (benchmarks/results/probe_int_flat_NVIDIA_H100_80GB_HBM3.json, 169c3fd)
FLAT_BLOCK, FLAT_WARPS = 256, 8
# _int_sum: copies a step, and elements a step: SUM_TILE over the copies, fewer on planes
# too small to give SUM_SPREAD programs such steps, down to SUM_MIN. On one H100 at 1063176
# (benchmarks/results/probe_int_sum_NVIDIA_H100_80GB_HBM3.json) int32 rows of 99 / 100 /
# 64 into 8 rows (128 copies) took 16.0 / 15.8 / 15.3 µs on steps of 32 elements against
# 19.4 / 19.2 / 18.8 on 256 (Inductor's partitions 13.9 / 18.9 / 32.5); rows of 99 into
# 1,024 rows (8 copies) 15.8 on 1,024 against 17.3 on 128. In the int grid at 550eecd
# (scatter_int_grid_NVIDIA_H100_80GB_HBM3.md) rows of 100 into 8 rows took 15.6 µs
# uniform against 18.9 at 601ea47.
SUM_COPIES, SUM_TILE, SUM_SPREAD, SUM_MIN = 32, 8192, 32, 32
# The one copy that the adds go into, where they take one, is a copy of self made by
# _int_copy, COPY_BLOCK elements a program on COPY_WARPS: on one H100 (probe_int_clone,
# 1063176) 359 µs for 512 MiB of int64 against 442 for torch's clone, 560 against 554 for
# 800 MiB, 23.9 against 24.2 for 32 MiB; in the int grid at 550eecd int64 rows of 1024
# into 65,536 rows 0.40 ms against 0.48 at 601ea47 (Inductor 0.44).
COPY_BLOCK, COPY_WARPS = 4096, 8
# Copies start a multiple of COPY_STRIDE elements apart, and _int_sum reads them up to
# that stride: Triton specializes an integer argument divisible by 16, and only then
# loads the copies in vectors (their addresses and mask aligned). On one
# H100 at 06fd582 (benchmarks/results/scatter_int_grid_w64_99_NVIDIA_H100_80GB_HBM3.md,
# aecb4bd) int32 rows of 99 into 8 rows (planes of 792 elements, 128 copies) took 79-80 µs
# against 19 for rows of 100 (planes of 800) in the int grid; with the copies' mask at
# the plane rather than the stride, 23.9 against 19.4 (probe_int_sum, 1063176).
COPY_STRIDE = 16


@triton.jit
def _asserted_rows(idx, r, n, rows, WIDE: tl.constexpr):
    # (output row, in range) of value rows r; an index out of range: a device-side assert
    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
    tl.device_assert(bad == 0, "index out of range in a commrt scatter")
    return i, ok


@triton.jit
def _int_adds(out, idx, vals, n, rows, P, D: tl.constexpr, DP: tl.constexpr,
              SUB: tl.constexpr, WIDE: tl.constexpr):
    r = tl.program_id(0) * SUB + tl.arange(0, SUB)
    if WIDE:
        r = r.to(tl.int64)
    i, ok = _asserted_rows(idx, r, n, rows, WIDE)
    dst = ((r % P) * rows + i) * D  # copy j % P of value row j
    c = tl.arange(0, DP)
    for c0 in range(0, D, DP):
        cc = c0 + c
        m = ok[:, None] & (cc < D)[None, :]
        v = tl.load(vals + r[:, None] * D + cc[None, :], mask=m, other=0)
        tl.atomic_add(out + dst[:, None] + cc[None, :], v, mask=m, sem="relaxed")


@triton.jit
def _int_flat(out, idx, vals, n, rows, stride, P: tl.constexpr, D: tl.constexpr,
              BLOCK: tl.constexpr, WIDE: tl.constexpr):
    # value element e of row j = e // D to copy j % P (copies stride elements apart)
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        e = e.to(tl.int64)
    r = e // D
    i, ok = _asserted_rows(idx, r, n, rows, WIDE)
    v = tl.load(vals + e, mask=ok, other=0)
    tl.atomic_add(out + (r % P) * stride + i * D + (e - r * D), v, mask=ok, sem="relaxed")


@triton.jit
def _int_sum(self_ptr, extra, out, plane, stride, P: tl.constexpr, CP: tl.constexpr,
             BLOCK: tl.constexpr):
    # out := self + copies 0 .. P - 1 of extra, stride elements apart (left zero), wrapping
    # as torch's sums. The copies are read up to stride (their padding is zero), so that
    # their mask, as their addresses, is aligned to 16 elements and the loads are vectors.
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m, other=0)
        for c0 in tl.static_range(0, P, CP):
            x += _copies(extra, stride, offs, offs < stride, c0, P + 1, CP, BLOCK)
        tl.store(out + offs, x, mask=m)


@triton.jit
def _int_copy(src, dst, numel, BLOCK: tl.constexpr):
    # dst := src, a block a program
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


DTYPES = INT_DTYPES

# without Triton's per-call argument binding (symm_mem.launch); debug keeps the assert,
# and no overflow checks: the sums wrap as torch's do
run_adds = Launcher(_int_adds, debug=True, sanitize_overflow=False)
run_flat = Launcher(_int_flat, debug=True, sanitize_overflow=False)
run_sum = Launcher(_int_sum, sanitize_overflow=False)
run_copy = Launcher(_int_copy)


def int_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                  partitions: int = 1, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) of integer values with native
    atomics, into ``partitions`` copies.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``replay``: a list that receives this call's replay
    (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, DTYPES, "int_index_add")
    P = partitions
    if n == 0 or rows * D == 0:
        return self.clone()
    adds = _launch(rows, n, D, P)
    buf = _buffer(self, rows, P)
    adds(buf, index, values, n, rows, P)
    if replay is not None:
        go = replay_call((adds, (buf, index, values, n, rows, P)))
        if go is not None:
            replay.append(_replay(go[0], n, rows, P))
    return _summed(self, buf, P)


def _buffer(self: torch.Tensor, rows: int, P: int) -> torch.Tensor:
    """What the atomics add into: a copy of ``self`` (one copy), else ``P`` zeroed copies."""
    if P == 1:
        return _copied(self)
    return torch.zeros((P * rows, *self.shape[1:]), device=self.device, dtype=self.dtype)


def _summed(self: torch.Tensor, buf: torch.Tensor, P: int) -> torch.Tensor:
    return buf if P == 1 else self + buf.view(P, *self.shape).sum(0, dtype=self.dtype)


def _replay(adds, n: int, rows: int, P: int):
    """``int_index_add`` of one shape again (see ``replay``)."""

    def again(self, index, values):
        buf = _buffer(self, rows, P)
        adds(buf, index, values, n, rows, P)
        return _summed(self, buf, P)

    return again


@functools.lru_cache(maxsize=1024)
def _launch(rows: int, n: int, D: int, P: int):
    """``_int_adds``' launch for one shape, ``Launcher.prepare``'d. Cached."""
    DP = min(next_pow2(D), MAX_COLUMNS)
    sub = max(1, ELEMENTS // DP)
    wide = max(n, P * rows) * D >= 1 << 31
    return run_adds.prepare((cdiv(n, sub),), WARPS, D=D, DP=DP, SUB=sub, WIDE=wide)


def int_flat_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                       partitions: int = 1, block: int = FLAT_BLOCK, warps: int = FLAT_WARPS,
                       replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) of integer values, one value
    element a thread, value row ``j`` into copy ``j % partitions`` of the output.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``partitions``: the copies (a power of two; one:
    the adds go into a copy of ``self``); ``block``, ``warps``: value elements a
    program, and its warps; ``replay``: a list that receives this call's replay
    (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, DTYPES,
                               "int_flat_index_add")
    plane = rows * D
    if n == 0 or plane == 0:
        return self.clone()
    stride = _stride(plane, partitions)
    adds, total = _flat_launches(rows, n, D, partitions, block, warps)
    out, extra = _flat_buffers(self, partitions, stride)
    adds(extra, index, values, n, rows, stride)
    if total is not None:
        total(self, extra, out, plane, stride)
    if replay is not None:
        go = replay_call((adds, (extra, index, values, n, rows, stride)),
                         (total, (self, extra, out, plane, stride)))
        if go is not None:
            replay.append(_flat_replay(go, n, rows, partitions, plane, stride))
    return out


def _stride(plane: int, P: int) -> int:
    """Elements from one copy to the next: ``plane`` rounded up to ``COPY_STRIDE``."""
    return plane if P == 1 else -(-plane // COPY_STRIDE) * COPY_STRIDE


def _flat_buffers(self: torch.Tensor, P: int, stride: int) -> tuple:
    """(output, what the adds go into): a copy of ``self`` twice for one copy, else an
    empty output and ``P`` copies, ``stride`` elements apart, of ``scatter_scratch`` zeros
    in the values' dtype."""
    if P == 1:
        out = _copied(self)
        return out, out
    words = self.element_size() // 4  # fp32 words an element
    extra = zeroed(self.device, P * stride * words).view(self.dtype)
    return torch.empty_like(self), extra


def _copied(self: torch.Tensor) -> torch.Tensor:
    """A copy of ``self`` (contiguous) by ``_int_copy``."""
    out = torch.empty_like(self)
    numel = self.numel()
    run_copy.call((cdiv(numel, COPY_BLOCK),), COPY_WARPS, src=self, dst=out, numel=numel,
                  BLOCK=COPY_BLOCK)
    return out


def _flat_replay(go, n: int, rows: int, P: int, plane: int, stride: int):
    """``int_flat_index_add`` of one shape again (see ``replay``)."""
    adds, total = go

    def again(self, index, values):
        out, extra = _flat_buffers(self, P, stride)
        adds(extra, index, values, n, rows, stride)
        if total is not None:
            total(self, extra, out, plane, stride)
        return out

    return again


@functools.lru_cache(maxsize=1024)
def _flat_launches(rows: int, n: int, D: int, P: int, block: int, warps: int) -> tuple:
    """``int_flat_index_add``'s launches for one shape and set of options, each
    ``Launcher.prepare``'d: the adds, and the sum (None for one copy). Cached."""
    plane = rows * D
    wide = max(n * D, P * _stride(plane, P)) >= 1 << 31
    adds = run_flat.prepare((cdiv(n * D, block),), warps, P=P, D=D, BLOCK=block, WIDE=wide)
    if P == 1:
        return adds, None
    cp = min(P, SUM_COPIES)
    blk = max(SUM_MIN, min(SUM_TILE // cp, next_pow2(cdiv(plane, SUM_SPREAD))))
    total = run_sum.prepare((min(cdiv(plane, blk), SUM_PROGRAMS),), 4, P=P, CP=cp, BLOCK=blk)
    return adds, total
