"""All-reduce fused with the residual add and RMSNorm that follow it in a decoder layer.

    new_residual = residual + all_reduce(x)            (fp32 sum, stored in x's dtype)
    normed       = new_residual * rsqrt(mean(new_residual**2) + eps) * weight

``x``, ``residual``, ``normed`` and ``new_residual`` are ``[rows, hidden]`` (contiguous),
``weight`` is ``[hidden]``; the norm reads the stored (rounded) ``new_residual``, as the
unfused ops would. A program owns whole rows (the norm needs them), so each kernel is
its algorithm's row-wise twin:

- ``one_shot_push``: Lamport push of rows (see ``one_shot_push``), no barrier;
- ``one_shot``: pull, every rank sums every row in rank order;
- ``two_shot_push``: rows split among ranks; each owner sums its rows, applies the norm
  once and writes both outputs to every rank (see ``two_shot_push``).

Every rank ends with bitwise the same outputs.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, int_spec, next_pow2
from .one_shot_push import clear_old, move_on, poll_slot, to_bits
from .signals import MAX_BLOCKS, block_barrier

MAX_HIDDEN = 16384  # one row lives in registers


@triton.jit
def _row_limit(row, rows, H):
    """Columns to touch in ``row``: ``H``, or none past the last row. Masks built as
    ``cols < _row_limit(...)`` are one block-vs-scalar comparison (a block mask ``&`` a
    scalar condition is refused by some Triton interpreters)."""
    return tl.minimum(H, (rows - row) * H)


@triton.jit
def _epilogue(acc, r, w, normed, new_res, row, H, eps, cols, cm, sm):
    """Residual add and RMSNorm of one fp32 row sum, given the row's residual ``r`` and the
    weight ``w`` (loaded before the wait for peers, off the critical path); stores the
    columns in ``sm`` and returns (normed, new_res)."""
    z = (acc + r.to(tl.float32)).to(new_res.dtype.element_ty)
    tl.store(new_res + row * H + cols, z, mask=sm)
    zf = z.to(tl.float32)
    var = tl.sum(zf * zf, axis=0) / H
    y = (zf * tl.rsqrt(var + eps) * w).to(normed.dtype.element_ty)
    tl.store(normed + row * H + cols, y, mask=sm)
    return y, z


@triton.jit(do_not_specialize=["rank", "timeout", "eps"])
def _push_rms_kernel(x, residual, weight, normed, new_res, push_tab, mine, meta, err_ptr, rank,
                     rows, H, slot, eps, timeout, WS: tl.constexpr, BLOCK_H: tl.constexpr,
                     SPLIT: tl.constexpr, BITS: tl.constexpr, TIMER: tl.constexpr):
    # Work item i is part i % SPLIT of row i // SPLIT: its program pushes that part, then
    # waits for the whole row (a cheap local read) and stores that part of the outputs.
    # With SPLIT > 1 a program waits for parts other programs push: the grid must be
    # resident at once (the launcher keeps it within the SM count).
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    ity = tl.int16 if BITS == 16 else tl.int32
    buf = tl.load(meta, volatile=True)
    tab = push_tab.to(tl.pointer_type(tl.uint64))
    CHUNK: tl.constexpr = BLOCK_H // SPLIT
    part_cols = tl.arange(0, CHUNK)
    for item in range(pid, rows * SPLIT, nprog):
        row = item // SPLIT
        c = (item % SPLIT) * CHUNK + part_cols
        pm = c < H
        bits = to_bits(tl.load(x + row * H + c, mask=pm), BITS)
        for p in tl.static_range(WS):
            dst = tl.load(tab + p).to(tl.pointer_type(ity)) + (buf * WS + rank) * slot
            tl.store(dst + row * H + c, bits, mask=pm)
    clear_old(meta, mine, buf, WS, BLOCK_H, slot * (BITS // 16))  # while the pushes fly
    move_on(meta, buf, rows * H * (BITS // 16))  # its latency hidden behind the wait
    own = mine.to(tl.pointer_type(ity))
    cols = tl.arange(0, BLOCK_H)
    cm = cols < H
    w = tl.load(weight + cols, mask=cm, other=0).to(tl.float32)
    for item in range(pid, rows * SPLIT, nprog):
        row = item // SPLIT
        lo = (item % SPLIT) * CHUNK
        r = tl.load(residual + row * H + cols, mask=cm, other=0)
        acc = tl.zeros([BLOCK_H], tl.float32)
        for p in tl.static_range(WS):
            v = poll_slot(own + (buf * WS + p) * slot + row * H + cols, cm, err_ptr, p, timeout,
                          BITS, TIMER)
            acc += v.to(x.dtype.element_ty, bitcast=True).to(tl.float32)
        _epilogue(acc, r, w, normed, new_res, row, H, eps, cols, cm,
                  cm & (cols >= lo) & (cols < lo + CHUNK))


@triton.jit(do_not_specialize=["rank", "timeout", "eps"])
def _one_shot_rms_kernel(x, residual, weight, normed, new_res, mine, bufs, pad_tab, err_ptr,
                         rank, rows, H, eps, timeout, WS: tl.constexpr, BLOCK_H: tl.constexpr,
                         COPY_IN: tl.constexpr, TIMER: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)
    cm = cols < H
    if COPY_IN:
        for row in range(pid, rows, nprog):
            tl.store(mine + row * H + cols, tl.load(x + row * H + cols, mask=cm), mask=cm)
    w = tl.load(weight + cols, mask=cm, other=0).to(tl.float32)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for row in range(pid, rows, nprog):
        r = tl.load(residual + row * H + cols, mask=cm, other=0)
        acc = tl.zeros([BLOCK_H], tl.float32)
        for p in tl.static_range(WS):
            acc += tl.load(bufs[p] + row * H + cols, mask=cm, cache_modifier=".cv").to(tl.float32)
        _epilogue(acc, r, w, normed, new_res, row, H, eps, cols, cm, cm)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


@triton.jit(do_not_specialize=["rank", "timeout", "eps"])
def _two_shot_rms_kernel(x, residual, weight, normed, new_res, contrib, result, contribs,
                         results, pad_tab, err_ptr, rank, rows, H, per, eps, timeout,
                         WS: tl.constexpr, BLOCK_H: tl.constexpr, TIMER: tl.constexpr):
    # Owner p holds rows [p*per, (p+1)*per); contribution slot s and result rows are laid
    # out by owner-local row j. Results: normed rows first, then new_residual rows.
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)
    cm = cols < H
    for p in tl.static_range(WS):
        if p != rank:
            for j in range(pid, per, nprog):
                row = p * per + j
                m = cols < _row_limit(row, rows, H)
                v = tl.load(x + row * H + cols, mask=m)
                tl.store(contribs[p] + (rank * per + j) * H + cols, v, mask=m)
    w = tl.load(weight + cols, mask=cm, other=0).to(tl.float32)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for j in range(pid, per, nprog):
        row = rank * per + j
        if row < rows:
            r = tl.load(residual + row * H + cols, mask=cm, other=0)
            acc = tl.zeros([BLOCK_H], tl.float32)
            for s in tl.static_range(WS):
                if s == rank:
                    v = tl.load(x + row * H + cols, mask=cm)
                else:
                    v = tl.load(contrib + (s * per + j) * H + cols, mask=cm,
                                cache_modifier=".cv")
                acc += v.to(tl.float32)
            y, z = _epilogue(acc, r, w, normed, new_res, row, H, eps, cols, cm, cm)
            for p in tl.static_range(WS):
                if p != rank:
                    tl.store(results[p] + row * H + cols, y, mask=cm)
                    tl.store(results[p] + (WS * per + row) * H + cols, z, mask=cm)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for p in tl.static_range(WS):
        if p != rank:
            for j in range(pid, per, nprog):
                row = p * per + j
                m = cols < _row_limit(row, rows, H)
                y = tl.load(result + row * H + cols, mask=m, cache_modifier=".cv")
                z = tl.load(result + (WS * per + row) * H + cols, mask=m, cache_modifier=".cv")
                tl.store(normed + row * H + cols, y, mask=m)
                tl.store(new_res + row * H + cols, z, mask=m)


_push = Launcher(_push_rms_kernel)
_one = Launcher(_one_shot_rms_kernel)
_two = Launcher(_two_shot_rms_kernel)


def _shape_key(x, H, rows, *tensors):
    """What Triton specialises on that varies per call: dtype, sizes, 16-byte alignment."""
    return (x.dtype, int_spec(H), int_spec(rows), tuple(t.data_ptr() % 16 for t in tensors))


def block_h(hidden: int) -> int:
    return next_pow2(hidden)


def one_shot_push_rmsnorm(*, x, residual, weight, normed, new_res, eps: float, push_tab: int,
                          mine: int, slot_bytes: int, meta, err, rank: int, world: int,
                          timeout: int, timer: bool, warps: int = 4, blocks: int = 132,
                          split: int = 1, resident: int | None = None,
                          **_unused) -> None:
    """Fused Lamport push; ``x.nbytes <= slot_bytes``. ``split`` programs share a row's
    push (each then reads the whole row back to normalise it); programs then wait for
    each other, so the grid stays within ``resident`` (programs surely running at once)."""
    rows, H = x.shape
    split = 1 << (max(1, min(split, block_h(H) // 16)).bit_length() - 1)  # a power of 2
    grid = max(1, min(rows * split, blocks, MAX_BLOCKS))
    if split > 1 and resident:
        grid = min(grid, resident)
    slot = slot_bytes // x.element_size()
    consts = (("WS", world), ("BLOCK_H", block_h(H)), ("SPLIT", split),
              ("BITS", x.element_size() * 8), ("TIMER", timer))
    key = (_shape_key(x, H, rows, x, residual, weight, normed, new_res), consts, warps,
           push_tab, mine, rank, int_spec(slot), int_spec(timeout))
    _push(key, grid, (x, residual, weight, normed, new_res, push_tab, mine, meta, err, rank,
                      rows, H, slot, eps, timeout), consts, warps)


def one_shot_rmsnorm(*, x, residual, weight, normed, new_res, eps: float, mine, bufs,
                     pad_tab: int, err, rank: int, timeout: int, timer: bool, warps: int = 8,
                     blocks: int = 132, **_unused) -> None:
    """Fused pull one_shot; ``x.numel()`` fits the workspace views."""
    rows, H = x.shape
    grid = max(1, min(rows, blocks, MAX_BLOCKS))
    consts = (("WS", len(bufs)), ("BLOCK_H", block_h(H)),
              ("COPY_IN", x.data_ptr() != mine.data_ptr()), ("TIMER", timer))
    key = (_shape_key(x, H, rows, x, residual, weight, normed, new_res), consts, warps, rank,
           pad_tab, int_spec(timeout))
    _one(key, grid, (x, residual, weight, normed, new_res, mine, bufs, pad_tab, err, rank, rows,
                     H, eps, timeout), consts, warps)


def rows_per_owner(rows: int, world: int) -> int:
    return -(-rows // world)


def two_shot_rmsnorm(*, x, residual, weight, normed, new_res, eps: float, contribs, results,
                     pad_tab: int, err, rank: int, timeout: int, timer: bool, warps: int = 8,
                     blocks: int = 132, **_unused) -> None:
    """Fused two_shot_push by rows; results areas hold ``2 * world * per * hidden`` elements."""
    rows, H = x.shape
    world = len(contribs)
    per = rows_per_owner(rows, world)
    grid = max(1, min(per, blocks, MAX_BLOCKS))
    consts = (("WS", world), ("BLOCK_H", block_h(H)), ("TIMER", timer))
    key = (_shape_key(x, H, rows, x, residual, weight, normed, new_res), int_spec(per), consts,
           warps, rank, pad_tab, int_spec(timeout))
    _two(key, grid, (x, residual, weight, normed, new_res, contribs[rank], results[rank],
                     contribs, results, pad_tab, err, rank, rows, H, per, eps, timeout),
         consts, warps)


def reference(x_sum: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernels compute, given the all-reduced ``x_sum`` (float64 for tests)."""
    z = (x_sum.float() + residual.float()).to(residual.dtype)
    zf = z.double()
    y = zf * torch.rsqrt(zf.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return y, z
