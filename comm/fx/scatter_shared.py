"""Triton kernels for accumulating scatters of single values (1-D, or rows of 1) into up to
``SHARED_PLANE`` output rows (``scatter_rule.shared_sums``: histograms over thousands of
bins, per-token or per-class sums) behind ``commrt::partitioned_index_put`` on CUDA.

Every program keeps the fp32 sum of every output element in shared memory and adds its
share of the values there, so that the only global traffic is the values, the indices and
one partial a program. Two launches (the shared adds land in another order each call):

1. ``_shared_partial``: program ``g`` zeroes its ``[rows, columns]`` sums in shared memory, adds
   its share of the values to them (``red.shared.add.f32``; values of the one row its
   sample finds hot are summed in registers instead, as contended shared adds serialize),
   and stores the sums as its partial. An index out of range makes its partial NaN (the
   plain op raises a device-side assert).
2. ``scatter_few._total``: output := ``self`` + the ``G`` partials, in the output's dtype.

fp32 outputs of over ``WIDE_PLANE`` single values (one program an SM) take one launch
after a copy of ``self``: each program adds every non-zero sum to the copy with an atomic
(``flush``); past ``SHARED_PLANE`` rows (up to ``SHARED_WINDOWS`` times that) it sums the
rows in windows of ``SHARED_PLANE``, reading its values once a window.

Triton gives a kernel no shared memory of its own choosing: ``_shared_partial`` reserves it
as the scratch of a ``tl.gather`` (``PLANE * COPIES * 4`` bytes of the ``global_smem``
every Triton kernel declares) and then uses it through inline PTX, fenced by barriers.
That holds only where Triton's own code uses no shared memory between the barriers;
``usable`` checks it on the variant compiled for each shape and dtypes (once: the
launches are cached), and a shape whose variant fails it raises ``Unfenced``; a GPU
whose shared memory cannot hold a program's sums raises ``NoRoom`` (both ``Unusable``:
the caller falls back).
"""

import functools
import re

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import shared_memory_per_sm, sm_count
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_few import run_total
from .scatter_kernels import INTERPRETER_SMS, PARTS, _rows_of, _wrapped, scatter_shape
from .scatter_rule import SHARED_PLANE, SHARED_WINDOWS

INTERPRETER_SHARED = 228 * 1024  # shared memory an SM is assumed to have without a GPU
SHARED_SHARE = 0.875  # of an SM's shared memory, for the programs' sums (H200: 200 KB)
PROGRAMS_PER_SM = 4  # at most, where their sums fit
COPY_BYTES = 64 * 1024  # a program's copies of the sums (one a warp) within this
PARTIAL_SHARE = 4  # partials at most a quarter of the values (beyond one program an SM)
WARPS = 8  # a _shared_partial program's
# ... where its sums take over WIDE_PLANE elements (one program an SM): on one H200, 4M
# values into 32,768 rows took 56.6 / 57.7 / 53.9 µs uniform / skewed / hot on 16 warps,
# 69.8 / 71.2 / 63.8 on 8 (benchmarks/results/probe_shared_windows_NVIDIA_H200.json)
WIDE_PLANE, WIDE_WARPS = 16384, 16
TILE = 2048  # value elements a _shared_partial step loads ([rows, columns])
SAMPLE = tl.constexpr(32)  # indices a program samples for its hot row
HOT_MIN = tl.constexpr(6)  # ... a row that takes this many of them is hot (about a fifth)
TOTAL_PROGRAMS = 128  # _total programs, where each takes at least TOTAL_MIN elements
TOTAL_MIN, TOTAL_TILE = 16, 8192  # ... and the partials a _total step loads
ZERO_STEP = 4096  # sums a _shared_partial step zeroes and reads
MARK_TEXT = "// commrt shared sums"  # on every PTX line of the inline assembly here
MARK = tl.constexpr(MARK_TEXT)


@triton.jit
def _shared_base():
    return tl.inline_asm_elementwise("mov.u32 $0, global_smem; " + MARK, "=r", [],
                                     dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _shared_zero(addr):
    return tl.inline_asm_elementwise("st.shared.b32 [$1], 0; mov.u32 $0, 0; " + MARK,
                                     "=r,r", [addr], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _shared_add(addr, v, pred, copy_mask, copy_bytes):
    # into copy (warp index & copy_mask) of the sums, copy_bytes apart
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 w, a; setp.ne.b32 p, $3, 0; mov.u32 w, %tid.x; "
        "shr.u32 w, w, 5; and.b32 w, w, $4; mad.lo.u32 a, w, $5, $1; "
        "@p red.shared.add.f32 [a], $2; } mov.u32 $0, 0; " + MARK,
        "=r,r,r,r,r,r", [addr, v, pred.to(tl.int32), copy_mask, copy_bytes], dtype=tl.int32,
        is_pure=False, pack=1)


@triton.jit
def _load_index(ptr, mask):
    # in the layout of its operands (a tl.load would take one of its own)
    if ptr.dtype.element_ty == tl.int32:
        return tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b32 $0, 0; "
            "@p ld.global.nc.b32 $0, [$1]; }",
            "=r,l,r", [ptr.to(tl.int64, bitcast=True), mask.to(tl.int32)], dtype=tl.int32,
            is_pure=True, pack=1).to(tl.int64)
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b64 $0, 0; @p ld.global.nc.b64 $0, [$1]; }",
        "=l,l,r", [ptr.to(tl.int64, bitcast=True), mask.to(tl.int32)], dtype=tl.int64,
        is_pure=True, pack=1)


@triton.jit
def _shared_read(addr):
    return tl.inline_asm_elementwise("ld.volatile.shared.f32 $0, [$1]; " + MARK, "=r,r",
                                     [addr], dtype=tl.float32, is_pure=False, pack=1)


@triton.jit
def _step(idx, vals, start, hi, c, cm, D: tl.constexpr, DP: tl.constexpr, RB: tl.constexpr):
    """(values in fp32, indices, in range, to add) of the ``RB`` rows from ``start``: 1-D
    where ``DP`` is 1, else ``[RB, DP]`` in the layout of the values' load (a layout
    conversion would go through shared memory: the indices load for every column)."""
    if DP == 1:
        r = start + tl.arange(0, RB)
        rm = r < hi
        v = tl.load(vals + r, mask=rm, other=0).to(tl.float32)
        ok = rm
    else:
        r = start + tl.arange(0, RB)[:, None] + 0 * c
        rm = r < hi
        v = tl.load(vals + r * D + c, mask=rm & cm, other=0).to(tl.float32)
        ok = rm & cm
    return v, _load_index(idx + r, rm), rm, ok


@triton.jit
def _shared_partial(idx, vals, part, n, rows, chunk, never, D: tl.constexpr,
                    DP: tl.constexpr, PLANE: tl.constexpr, COPIES: tl.constexpr,
                    RB: tl.constexpr, HOT: tl.constexpr, WIDE: tl.constexpr,
                    ZC: tl.constexpr, W: tl.constexpr = 1, FLUSH: tl.constexpr = False,
                    FZ: tl.constexpr = 512):
    # ZC: sums zeroed and read a step (a [PLANE] tensor would hold PLANE / threads
    # registers a thread). FLUSH (single values, one copy): part is the fp32 output, to
    # which each non-zero sum is added with an atomic (FZ a step: a lane an element, so
    # a warp's adds land on one line); the rows go through shared memory in W windows of
    # PLANE rows, each window's adds over all of the program's values.
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    plane = rows * D
    oc = tl.arange(0, PLANE * COPIES)
    # Reserve PLANE * COPIES * 4 bytes of shared memory: a gather's scratch. Its result is
    # stored where `never` (0) is over an offset, so that it is not dropped.
    reserve = tl.gather(oc.to(tl.float32), oc, 0)
    tl.store(part + oc, reserve, mask=oc < never)
    h = -1
    if HOT:  # the row that takes HOT_MIN of SAMPLE of this program's indices, if any
        s = lo + tl.arange(0, SAMPLE) * ((hi - lo) // SAMPLE)
        si, sok, _ = _rows_of(idx, s, hi, rows, WIDE)
        si = tl.where(sok, si, -1)
        cnt = tl.sum(((si[:, None] == si[None, :]) & sok[None, :]).to(tl.int32), axis=1)
        top = tl.max(cnt)
        h = tl.min(tl.where(cnt == top, si, rows))
        h = tl.where((top >= HOT_MIN) & (hi - lo >= SAMPLE), h, -1)
    tl.debug_barrier()
    base = _shared_base()
    c = tl.arange(0, DP)[None, :]
    cm = c < D
    # carried over the loop in the layout of the values' load (single values: 1-D steps);
    # in Triton's default layout they made it load the indices a second time a step
    if DP == 1:
        r0 = tl.arange(0, RB)
        hacc = tl.load(vals + lo + r0, mask=r0 < 0, other=0).to(tl.float32)
        bad_any = hacc.to(tl.int32)
    else:
        hacc = tl.zeros([RB, DP], tl.float32)
        bad_any = tl.zeros([RB, DP], tl.int32)
    for w in tl.static_range(W):
        for z in tl.static_range(0, PLANE * COPIES, ZC):
            _shared_zero(base + (z + tl.arange(0, ZC)) * 4)
        tl.debug_barrier()
        for start in range(lo, hi, RB):
            v, i, rm, ok = _step(idx, vals, start, hi, c, cm, D, DP, RB)
            i, bad = _wrapped(i, rm, rows)
            ok = ok & (bad == 0)
            if w == 0:
                bad_any |= bad.to(tl.int32)
            if HOT:
                hot = i == h
                if w == 0:
                    hacc += tl.where(hot, v, 0.0)
                ok = ok & (hot == 0)
            if W > 1:  # this window's rows
                i -= w * PLANE
                ok = ok & (i >= 0) & (i < PLANE)
            if DP > 1:
                i = i * D + c
            _shared_add(base + i.to(tl.int32) * 4, v, ok, COPIES - 1, PLANE * 4)
        tl.debug_barrier()
        if FLUSH:
            for z in range(0, PLANE, FZ):
                o = z + tl.arange(0, FZ)
                x = _shared_read(base + o * 4)
                e = w * PLANE + o
                tl.atomic_add(part + e, x, mask=(x != 0) & (e < plane), sem="relaxed")
        else:
            dst = part + g * plane
            for z in tl.static_range(0, PLANE, ZC):
                o = z + tl.arange(0, ZC)
                x = _shared_read(base + o * 4)
                for k in tl.static_range(1, COPIES):
                    x += _shared_read(base + (k * PLANE + o) * 4)
                tl.store(dst + o, x, mask=o < plane)
        tl.debug_barrier()
    if FLUSH:
        dst = part
    else:
        dst = part + g * plane
    if tl.max(bad_any) > 0:  # poison: the sum of every partial (the output) is NaN
        for y in range(0, plane, ZC):
            q = y + tl.arange(0, ZC)
            nan = tl.full([ZC], float("nan"), tl.float32)
            if FLUSH:
                tl.atomic_add(dst + q, nan, mask=q < plane, sem="relaxed")
            else:
                tl.store(dst + q, nan, mask=q < plane)
    if HOT:
        if h >= 0:  # the hot row's sums, added to what this program stored
            tl.debug_barrier()
            hs = tl.sum(hacc, axis=0)
            cc = tl.arange(0, DP)
            p = dst + h * D + cc
            if FLUSH:
                tl.atomic_add(p, hs, mask=cc < D, sem="relaxed")
            else:
                tl.store(p, tl.load(p, mask=cc < D) + hs, mask=cc < D)


def fenced(ptx: str) -> bool:
    """Whether the PTX of ``_shared_partial`` touches shared memory, between the zeroing of its
    sums and their read, only through this module's inline assembly."""
    lines = ptx.splitlines()
    ours = [k for k, line in enumerate(lines) if MARK_TEXT in line and ".shared" in line]
    if not ours:
        return False
    shared = re.compile(r"\b(ld|st|atom|red|cp\.async|ldmatrix|stmatrix)\S*\.shared")
    return not any(shared.search(lines[k]) and MARK_TEXT not in lines[k]
                   for k in range(ours[0], ours[-1] + 1))


class Unusable(RuntimeError):
    """The shared sums cannot run here; the caller falls back."""


class Unfenced(Unusable):
    """This Triton's code for ``_shared_partial`` uses shared memory beside its sums."""


class NoRoom(Unusable):
    """This GPU's shared memory cannot hold one program's sums."""


def usable(kernel, meta: dict) -> bool:
    """Whether a compiled ``_shared_partial`` reserved its sums and leaves them alone."""
    need = meta["PLANE"] * meta["COPIES"] * 4
    return kernel.metadata.shared >= need and fenced(kernel.asm["ptx"])


run_partial = Launcher(_shared_partial)


@functools.lru_cache(maxsize=1024)
def _launches(device: torch.device, n: int, rows: int, D: int, itype: torch.dtype,
              dtype: torch.dtype, hot: bool, flush: bool, launch: tuple) -> tuple | None:
    """``shared_sums_index_add``'s launches for ``n`` values (``n`` > 0) of ``D`` elements
    into ``rows`` rows (``launch``: ``partial_launch``'s options as sorted items):
    ``(G, _shared_partial's integer arguments, its launch, _total's launch (None with
    flush))``, each ``Launcher.prepare``'d; None where this Triton's code for it uses
    shared memory beside the sums (``usable``, checked on the compiled variant). Cached: a
    call of a shape seen before computes none of it."""
    G, ints, meta = _plan(n, device, rows, D, hot, flush=flush, **dict(launch))
    probe = [torch.empty(1, dtype=t, device=device) for t in (itype, dtype, torch.float32)]
    if not usable(_shared_partial.warmup(*probe, *ints, grid=(G,), **meta), meta):
        return None
    consts = dict(meta)
    warps, stages = consts.pop("num_warps"), consts.pop("num_stages")
    partial = run_partial.prepare((G,), warps, stages=stages, **consts)
    if flush:
        return G, ints, partial, None
    plane = rows * D
    pb = max(TOTAL_MIN, next_pow2(plane) // TOTAL_PROGRAMS)
    total = run_total.prepare((cdiv(plane, pb),), 4, PB=pb,
                              GB=max(1, min(next_pow2(G), TOTAL_TILE // pb)))
    return G, ints, partial, total


DTYPES = tuple(PARTS)


def launch_shape(plane: int, values: int, steps: int, sms: int, shared: int,
                 warps: int = WARPS, copies: int | None = None,
                 per_sm: int | None = None) -> tuple[int, int]:
    """``(programs, copies)`` of ``_shared_partial``: a copy of the sums a warp while they
    fit in COPY_BYTES, as many programs an SM (at most PROGRAMS_PER_SM) as SHARED_SHARE of
    its ``shared`` bytes hold, no more programs than steps of values, and partials of at
    most 1/PARTIAL_SHARE of the values where there are more programs than SMs."""
    cap = max(sms, values // (PARTIAL_SHARE * max(1, plane)))
    plane = next_pow2(plane)
    if copies is None:
        copies = 1
        while copies < warps and 2 * copies * plane * 4 <= COPY_BYTES:
            copies *= 2
    if per_sm is None:
        per_sm = max(1, min(PROGRAMS_PER_SM, int(SHARED_SHARE * shared) // (4 * plane * copies)))
    return max(1, min(per_sm * sms, steps, cap)), copies


def partial_launch(index: torch.Tensor, rows: int, D: int, hot: bool = True,
                   **launch) -> tuple[int, tuple, dict]:
    """``(programs, the integer arguments, the constexprs and options)`` of
    ``_shared_partial`` for ``len(index)`` rows of ``D`` values into ``rows`` rows
    (``launch``: ``warps``, ``tile``, ``copies``, ``per_sm``, and ``flush``: single values
    added to the fp32 output, in windows of ``SHARED_PLANE`` rows past it)."""
    return _plan(index.numel(), index.device, rows, D, hot, **launch)


def _plan(n: int, dev: torch.device, rows: int, D: int, hot: bool = True,
          warps: int | None = None, tile: int = TILE, copies: int | None = None,
          per_sm: int | None = None, flush: bool = False) -> tuple[int, tuple, dict]:
    plane, DP = rows * D, next_pow2(D)
    windows = 1
    if flush:
        if D != 1:
            raise ValueError(f"shared sums flush single values, got rows of {D}")
        windows, copies = cdiv(plane, SHARED_PLANE), 1
        plane = cdiv(plane, windows)
    if warps is None:
        warps = WARPS if plane <= WIDE_PLANE else WIDE_WARPS
    rb = max(1, tile // DP)
    shared = shared_memory_per_sm(dev) or INTERPRETER_SHARED
    G, copies = launch_shape(plane, n * D, cdiv(n, rb), sm_count(dev) or INTERPRETER_SMS,
                             shared, warps, copies, per_sm)
    need = next_pow2(plane) * copies * 4
    if need > SHARED_SHARE * shared:
        raise NoRoom(f"shared_sums_index_add: {rows} rows of {D} need {need} bytes of "
                     f"shared memory a program; {dev} has {shared} an SM")
    meta = {"D": D, "DP": DP, "PLANE": next_pow2(plane), "COPIES": copies, "RB": rb,
            "HOT": hot and D < 32, "WIDE": n * D >= 1 << 31,
            "ZC": min(ZERO_STEP, next_pow2(plane)), "num_warps": warps,
            "num_stages": 1}
    if flush:
        meta.update(W=windows, FLUSH=True, FZ=32 * warps)
    return G, (n, rows, cdiv(n, G), 0), meta


def shared_sums_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                          hot: bool = True, flush: bool | None = None,
                          replay: list | None = None, **launch) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) for outputs of at most
    ``SHARED_PLANE`` elements, and fp32 single values into up to ``SHARED_WINDOWS`` times
    that many rows.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``hot``: sum each program's hot row in registers;
    ``flush``: add the sums to a copy of ``self`` with atomics instead of storing a partial
    a program (None: fp32 outputs of over ``WIDE_PLANE`` elements, one program an SM);
    ``launch``: ``partial_launch``'s ``warps``, ``tile``, ``copies``, ``per_sm``;
    ``replay``: a list that receives this call's replay (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, 1, DTYPES, "shared_sums_index_add")
    plane = rows * D
    fp32 = self.dtype == torch.float32
    if flush is None:  # on one H200, 4M values into 32,768 rows: 36.3 / 36.7 / 33.2 µs
        # uniform / skewed / hot so against 41.3 / 42.7 / 38.7 with partials, into 16,384
        # rows 52.8 / 55.7 / 46.4 against 49.5 / 52.7 / 43.4
        # (benchmarks/results/probe_window_flush_sums_NVIDIA_H200.json, e26c5bc)
        flush = fp32 and D == 1 and plane > WIDE_PLANE
    if flush and not fp32:
        raise ValueError(f"shared_sums_index_add flushes into fp32 outputs, got {self.dtype}")
    if plane > (SHARED_WINDOWS * SHARED_PLANE if flush else SHARED_PLANE):
        raise ValueError(f"shared_sums_index_add takes outputs of at most {SHARED_PLANE} "
                         f"elements (fp32 single values: {SHARED_WINDOWS * SHARED_PLANE} "
                         f"rows), got {rows} rows of {D} in {self.dtype}")
    if self.device.type != "cuda":
        raise ValueError(f"shared_sums_index_add runs on CUDA tensors, got {self.device}")
    if plane == 0 or n == 0:
        return self.clone()
    plan = _launches(self.device, n, rows, D, index.dtype, values.dtype, hot, flush,
                     tuple(sorted(launch.items())))
    if plan is None:
        raise Unfenced(f"shared_sums_index_add: this Triton's code for {rows} rows of {D} "
                       "uses shared memory beside its sums")
    G, ints, partial, total = plan
    if flush:
        out = self.clone()
        partial(index, values, out, *ints)
        if replay is not None:
            go = replay_call((partial, (index, values, out, *ints)))
            if go is not None:
                replay.append(_replay(go + (None,), ints, G, 0))
        return out
    out = torch.empty_like(self)
    part = torch.empty(G * plane, device=self.device, dtype=torch.float32)
    partial(index, values, part, *ints)
    total(self, part, out, G, plane)
    if replay is not None:
        go = replay_call((partial, (index, values, part, *ints)),
                         (total, (self, part, out, G, plane)))
        if go is not None:
            replay.append(_replay(go, ints, G, plane))
    return out


def _replay(go, ints: tuple, G: int, plane: int):
    """``shared_sums_index_add`` of one shape again (see ``replay``): with no ``_total``
    (the flush), into a copy of ``self``."""
    partial, total = go

    def again(self, index, values):
        if total is None:
            out = self.clone()
            partial(index, values, out, *ints)
            return out
        out = torch.empty_like(self)
        part = torch.empty(G * plane, device=self.device, dtype=torch.float32)
        partial(index, values, part, *ints)
        total(self, part, out, G, plane)
        return out

    return again
