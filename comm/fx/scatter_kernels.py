"""Triton kernels behind ``commrt::partitioned_index_put`` on CUDA.

Three launches, no host sync:

1. ``_prepare``: fp32 copy 0 of the output := ``self``, copies 1..P-1 := 0; program 0
   also estimates contention from a strided sample of the indices (distinct rows among
   ``SAMPLE``) and stores the partition count to use, ``P`` or 1, on the device.
2. ``_scatter``: a program takes ``BLOCK_N`` indices. If they hold at most ``LEADERS``
   distinct rows it sums the values of each row first and adds one row per distinct
   index (k=0: one atomic row per program instead of ``BLOCK_N``); otherwise every
   value row is added atomically into copy ``program % p``.
3. ``_sum``: the output := sum of the first ``p`` copies, in the output's dtype; an index
   out of range poisons it with NaN (the plain op would raise a device-side assert).
"""

import torch
import triton
import triton.language as tl

SAMPLE = 512
LEADERS = 8


@triton.jit
def _prepare(self_ptr, copies, idx, p_out, err, n, rows, D, P: tl.constexpr,
             SAMPLE: tl.constexpr, CONTENDED: tl.constexpr, BLOCK: tl.constexpr,
             TILE: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    plane = rows * D
    for start in range(pid * BLOCK, P * plane, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(self_ptr + offs, mask=offs < plane, other=0).to(tl.float32)
        tl.store(copies + offs, v, mask=offs < P * plane)
    if pid == 0:
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
        tl.store(p_out, tl.where(distinct <= CONTENDED, P, 1))
        tl.store(err, 0)


@triton.jit
def _scatter(copies, idx, vals, p_ptr, err, n, rows, D, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr, LEADERS: tl.constexpr):
    pid = tl.program_id(0)
    p = tl.load(p_ptr)
    base = copies + (pid % p).to(tl.int64) * rows * D
    r = pid.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = r < n
    i = tl.load(idx + r, mask=rm, other=0).to(tl.int64)
    i = tl.where(i < 0, i + rows, i)
    bad = rm & ((i < 0) | (i >= rows))
    if tl.max(bad.to(tl.int32)) > 0:
        tl.store(err, 1)
    rm = rm & (bad == 0)
    i = tl.where(rm, i, -1)
    k = tl.arange(0, BLOCK_N)
    earlier = (i[:, None] == i[None, :]) & (k[None, :] < k[:, None])
    first = rm & (tl.max(earlier.to(tl.int32), axis=1) == 0)
    distinct = tl.sum(first.to(tl.int32))
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        cm = cols < D
        v = tl.load(vals + r[:, None] * D + cols[None, :], mask=rm[:, None] & cm[None, :],
                    other=0).to(tl.float32)
        if distinct <= LEADERS:
            todo = rm
            for _ in range(distinct):
                lead = tl.min(tl.where(todo, i, rows))
                sel = todo & (i == lead)
                s = tl.sum(tl.where(sel[:, None], v, 0.0), axis=0)
                tl.atomic_add(base + lead * D + cols, s, mask=cm, sem="relaxed")
                todo = todo & (sel == 0)
        else:
            tl.atomic_add(base + i[:, None] * D + cols[None, :], v,
                          mask=rm[:, None] & cm[None, :], sem="relaxed")


@triton.jit
def _sum(copies, out, p_ptr, err, plane, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < plane
    p = tl.load(p_ptr)
    acc = tl.load(copies + offs, mask=m, other=0)
    for c in range(1, p):
        acc += tl.load(copies + c * plane + offs, mask=m, other=0)
    acc = tl.where(tl.load(err) != 0, float("nan"), acc)
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=m)


def partitioned_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                          partitions: int, contended_rows: int) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) with the scheme above.

    ``self`` and ``values`` contiguous, ``values`` shaped ``[len(index), *self.shape[1:]]``.
    """
    rows, n = self.shape[0], index.numel()
    D = self.numel() // max(1, rows)
    out = torch.empty_like(self)
    if out.numel() == 0:
        return out
    plane = rows * D
    copies = torch.empty(partitions * plane, device=self.device, dtype=torch.float32)
    state = torch.empty(2, device=self.device, dtype=torch.int32)  # [p, error]
    p, err = state[0:1], state[1:2]
    _prepare[(max(1, min(1024, triton.cdiv(partitions * plane, 4096))),)](
        self, copies, index, p, err, n, rows, D, P=partitions, SAMPLE=SAMPLE,
        CONTENDED=contended_rows, BLOCK=4096, TILE=64)
    if n:
        block_d = min(triton.next_power_of_2(D), 128)
        block_n = min(64, max(16, 4096 // block_d))
        _scatter[(triton.cdiv(n, block_n),)](copies, index, values, p, err, n, rows, D,
                                             BLOCK_N=block_n, BLOCK_D=block_d, LEADERS=LEADERS)
    _sum[(triton.cdiv(plane, 1024),)](copies, out, p, err, plane, BLOCK=1024)
    return out
