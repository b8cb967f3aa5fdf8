"""Triton kernels behind ``commrt::partitioned_index_put`` on CUDA.

Three launches, no host sync:

1. ``_prepare``: estimates contention from a strided sample of the indices (distinct
   rows among ``SAMPLE``) and picks ``p``, the power of two (at most ``P``) that brings
   the expected adds per address under ``PER_ADDRESS``; stores it on the device and
   fills the copies used: copy 0 := ``self`` (fp32), copies 1..p-1 := 0.
2. ``_scatter``: every value element is added atomically into copy ``row % p`` of its
   output row (``row`` = the element's row in ``values``), over the flat values.
3. ``_sum``: the output := sum of the first ``p`` copies, in the output's dtype; an index
   out of range poisons it with NaN (the plain op would raise a device-side assert).
"""

import torch
import triton
import triton.language as tl

from .scatter import PER_ADDRESS, SAMPLE


@triton.jit
def _prepare(self_ptr, copies, idx, p_out, err, n, rows, D, P: tl.constexpr,
             SAMPLE: tl.constexpr, PER_ADDRESS: tl.constexpr, BLOCK: tl.constexpr,
             TILE: tl.constexpr):
    # Every program estimates p (the same way, so alike) and fills its share of the
    # p copies actually used: copy 0 := self (fp32), the rest := 0.
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    step = tl.maximum(n // SAMPLE, 1)
    distinct = 0
    for ib in tl.static_range(0, SAMPLE, TILE):
        ipos = ib + tl.arange(0, TILE)
        ivalid = ipos * step < n
        a = tl.load(idx + ipos * step, mask=ivalid, other=0).to(tl.int64)
        a = tl.where(a < 0, a + rows, a)
        dup = tl.zeros([TILE], tl.int32)
        for jb in tl.static_range(0, ib + TILE, TILE):
            jpos = jb + tl.arange(0, TILE)
            b = tl.load(idx + jpos * step, mask=jpos * step < n, other=0).to(tl.int64)
            b = tl.where(b < 0, b + rows, b)
            eq = (a[:, None] == b[None, :]) & (jpos[None, :] < ipos[:, None])
            dup = tl.maximum(dup, tl.max(eq.to(tl.int32), axis=1))
        distinct += tl.sum((ivalid & (dup == 0)).to(tl.int32))
    # enough copies that each address expects at most PER_ADDRESS atomic adds
    load = tl.maximum(distinct, 1).to(tl.int64) * PER_ADDRESS
    need = (n + load - 1) // load
    p = 1
    while (p < need) & (p < P):
        p *= 2
    plane = rows * D
    for start in range(pid * BLOCK, p * plane, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(self_ptr + offs, mask=offs < plane, other=0).to(tl.float32)
        tl.store(copies + offs, v, mask=offs < p * plane)
    if pid == 0:
        tl.store(p_out, p)
        tl.store(err, 0)


@triton.jit
def _scatter(copies, idx, vals, p_ptr, err, total, rows, D: tl.constexpr,
             BLOCK: tl.constexpr, WIDE: tl.constexpr):
    # D is a compile-time constant (divisions by it are multiplies); offsets are int32
    # unless the values hold 2**31 elements or more (WIDE).
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        offs = offs.to(tl.int64)
    m = offs < total
    r = offs // D  # the value row, and so the index it goes with
    i = tl.load(idx + r, mask=m, other=0)
    i = tl.where(i < 0, i + rows, i)
    bad = m & ((i < 0) | (i >= rows))
    tl.store(err + 0 * offs, 1, mask=bad)
    m = m & (bad == 0)
    if not WIDE:
        i = i.to(tl.int32)  # in range, so it fits
    v = tl.load(vals + offs, mask=m, other=0).to(tl.float32)
    part = r & (tl.load(p_ptr) - 1)  # p is a power of two
    tl.atomic_add(copies + (part * rows + i) * D + (offs - r * D), v, mask=m, sem="relaxed")


@triton.jit
def _sum(copies, out, p_ptr, err, plane, BLOCK: tl.constexpr, CP: tl.constexpr):
    # CP copies a step, so that up to 128 copies are read with enough loads in flight
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < plane
    p = tl.load(p_ptr)
    acc = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, p, CP):
        c = (c0 + tl.arange(0, CP)).to(tl.int64)
        t = tl.load(copies + c[:, None] * plane + offs[None, :],
                    mask=(c[:, None] < p) & m[None, :], other=0)
        acc += tl.sum(t, axis=0)
    acc = tl.where(tl.load(err) != 0, float("nan"), acc)
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=m)


def partitioned_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                          partitions: int, per_address: int = PER_ADDRESS) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) with the scheme above.

    ``self`` and ``values`` contiguous, ``values`` shaped ``[len(index), *self.shape[1:]]``.
    """
    if partitions < 1 or partitions & (partitions - 1):
        raise ValueError(f"partitions must be a power of two, got {partitions}")
    rows, n = self.shape[0], index.numel()
    D = self.numel() // max(1, rows)
    out = torch.empty_like(self)
    if out.numel() == 0:
        return out
    plane = rows * D
    copies = torch.empty(partitions * plane, device=self.device, dtype=torch.float32)
    state = torch.empty(2, device=self.device, dtype=torch.int32)  # [p, error]
    p, err = state[0:1], state[1:2]
    _prepare[(max(1, min(264, triton.cdiv(partitions * plane, 4096))),)](
        self, copies, index, p, err, n, rows, D, P=partitions, SAMPLE=SAMPLE,
        PER_ADDRESS=per_address, BLOCK=4096, TILE=64)
    if n * D:
        wide = max(n * D, partitions * plane) >= 1 << 31
        _scatter[(triton.cdiv(n * D, 1024),)](copies, index, values, p, err, n * D, rows, D=D,
                                              BLOCK=1024, WIDE=wide)
    _sum[(triton.cdiv(plane, 256),)](copies, out, p, err, plane, BLOCK=256, CP=16)
    return out
