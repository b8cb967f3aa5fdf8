"""Do single values into 65,536 rows gain from shared-memory sums over windows of rows
flushed by atomics of the non-zero sums, and would a kernel that holds that shared memory
still add uncontended values as fast as the narrow kernels?

One GPU. fp32 1-D values into 65,536 rows went to the narrow kernels, whose copies took
skewed indices 1.12-1.17x Inductor's partitions in the grid. ``scatter_shared`` sums up to
32,768 rows in shared memory and stores a dense partial a program; over windows (and
dense partials) 65,536 rows took 88 µs (``probe_shared_windows_NVIDIA_H200.json``). Here
``_windowed`` runs one program an SM on 16 warps, with 32,768 sums reserved in shared
memory; with ``flag`` set it sums each contiguous window of 32,768 rows there in turn
(every program reading its share of the indices once a window) and adds each non-zero sum
to the output with one atomic, a warp's 32 lanes on one 128-byte line; with ``flag``
clear it adds the values straight to the output with atomics (as a merged kernel would
where the plan sees no contention). For 4M fp32 values, µs a call in a CUDA graph of 20
calls (median of five rounds taken in turn): the op as the pass calls it, the narrow
kernels, the output's copy plus ``_windowed`` each way (``windows, hot row``: each program's
row that takes 6 of 32 sampled indices summed in registers), the direct adds without the
shared memory reserved, and Inductor's plain and partitioned scatters (``index_put``).

    python benchmarks/probes/probe_window_flush.py [--out probe_window_flush.json]

``--flush``: ``scatter_shared`` itself into 1,024 to 65,536 rows, its sums added to the
output with atomics (``flush``) against a partial a program (up to 32,768 rows).
"""

from __future__ import annotations

import sys

import torch
import torch._inductor.config as ic
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import SHARED_PLANE, pair_sample
from commrt.fx.scatter_shared import (
    _load_index,
    _shared_add,
    _shared_base,
    _shared_read,
    _shared_zero,
    fenced,
    shared_sums_index_add,
)

DEV = torch.device("cuda")
ROUNDS = 5
DISTS = ("uniform", "skewed", "hot")
CELLS = tuple((rows, d) for rows in (65536, 32768, 131072) for d in DISTS)
PLANE = 32768  # sums a window (128 KB)
WARPS = 16
RB = 2048  # values a step
ZC = 4096  # sums a zeroing step
SAMPLE = tl.constexpr(32)  # indices a program samples for its hot row
HOT_MIN = tl.constexpr(6)  # ... a row that takes this many of them is hot


@triton.jit
def _direct(idx, vals, acc, rows, lo, hi, RB: tl.constexpr):
    for start in range(lo, hi, RB):
        r = start + tl.arange(0, RB)
        rm = r < hi
        v = tl.load(vals + r, mask=rm, other=0).to(tl.float32)
        i = tl.load(idx + r, mask=rm, other=0)
        i = tl.where(i < 0, i + rows, i)
        tl.atomic_add(acc + i, v, mask=rm, sem="relaxed")


@triton.jit
def _windowed(idx, vals, acc, flag, n, rows, chunk, never, PLANE: tl.constexpr,
              W: tl.constexpr, RB: tl.constexpr, ZC: tl.constexpr, FZ: tl.constexpr,
              RESERVE: tl.constexpr, HOT: tl.constexpr = False):
    g = tl.program_id(0)
    lo = g * chunk
    hi = tl.minimum(lo + chunk, n)
    if not RESERVE:
        _direct(idx, vals, acc, rows, lo, hi, RB)
        return
    # PLANE * 4 bytes of shared memory: a gather's scratch
    oc = tl.arange(0, PLANE)
    reserve = tl.gather(oc.to(tl.float32), oc, 0)
    tl.store(acc + oc, reserve, mask=oc < never)
    if tl.load(flag) != 0:
        h = -1
        if HOT:  # the row that takes HOT_MIN of SAMPLE of this program's indices, if any
            s = lo + tl.arange(0, SAMPLE) * ((hi - lo) // SAMPLE)
            si = tl.load(idx + s, mask=s < hi, other=-1)
            si = tl.where(si < 0, si + rows, si)
            si = tl.where(s < hi, si, -1 - tl.arange(0, SAMPLE))
            cnt = tl.sum((si[:, None] == si[None, :]).to(tl.int32), axis=1)
            top = tl.max(cnt)
            h = tl.min(tl.where(cnt == top, si, rows))
            h = tl.where(top >= HOT_MIN, h, -1)
        hacc = tl.zeros([RB], tl.float32)
        tl.debug_barrier()
        base = _shared_base()
        for w in tl.static_range(W):
            for z in tl.static_range(0, PLANE, ZC):
                _shared_zero(base + (z + tl.arange(0, ZC)) * 4)
            tl.debug_barrier()
            for start in range(lo, hi, RB):
                r = start + tl.arange(0, RB)
                rm = r < hi
                v = tl.load(vals + r, mask=rm, other=0).to(tl.float32)
                i = _load_index(idx + r, rm)
                i = tl.where(i < 0, i + rows, i)
                ok = rm & (i >= w * PLANE) & (i < (w + 1) * PLANE)
                if HOT:
                    hot = i == h
                    if w == 0:
                        hacc += tl.where(hot & rm, v, 0.0)
                    ok = ok & (hot == 0)
                i = i - w * PLANE
                _shared_add(base + i.to(tl.int32) * 4, v, ok, 0, PLANE * 4)
            tl.debug_barrier()
            for z in range(0, PLANE, FZ):  # a lane an element: a warp's adds on one line
                o = z + tl.arange(0, FZ)
                x = _shared_read(base + o * 4)
                row = w * PLANE + o
                tl.atomic_add(acc + row, x, mask=(x != 0) & (row < rows), sem="relaxed")
            tl.debug_barrier()
        if HOT:
            if h >= 0:
                tl.atomic_add(acc + h, tl.sum(hacc), sem="relaxed")
    else:
        _direct(idx, vals, acc, rows, lo, hi, RB)


_checked: dict = {}


def windowed(out, idx, vals, flag, reserve: bool = True, hot: bool = False):
    """``out.index_add(0, idx, vals)`` (fp32, 1-D) through ``_windowed``."""
    acc = out.clone()
    n, rows = idx.numel(), out.numel()
    G = torch.cuda.get_device_properties(DEV).multi_processor_count
    W = triton.cdiv(rows, PLANE)
    args = (idx, vals, acc, flag, n, rows, triton.cdiv(n, G), 0)
    meta = {"PLANE": PLANE, "W": W, "RB": RB, "ZC": ZC, "FZ": 32 * WARPS,
            "RESERVE": reserve, "HOT": hot, "num_warps": WARPS, "num_stages": 1}
    key = (rows, reserve, hot)
    if key not in _checked:
        k = _windowed.warmup(*args, grid=(G,), **meta)
        _checked[key] = k.metadata.shared, not reserve or fenced(k.asm["ptx"])
        assert not reserve or (k.metadata.shared >= PLANE * 4 and _checked[key][1]), \
            ("shared memory not fenced", _checked[key])
    _windowed[(G,)](*args, **meta)
    return acc


def _plain(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def _parted(o, i, v):  # the same op, compiled with Inductor's partitions
    return torch.index_put(o, (i,), v, accumulate=True)


def cell(rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(torch.float32, 0, rows, dist)
    P = pass_scatter.copies(rows, 1, idx.numel(), torch.float32,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    on = torch.ones(1, device=DEV, dtype=torch.int32)
    off = torch.zeros(1, device=DEV, dtype=torch.int32)
    torch._dynamo.reset()  # two functions of their own code: dynamo caches by code
    plain, parted = torch.compile(_plain, dynamic=False), torch.compile(_parted, dynamic=False)
    with ic.patch({"fx_graph_cache": False}):
        plain(out, idx, vals)
    with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
        parted(out, idx, vals)
    calls = {
        "op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
        "narrow": lambda: narrow_index_add(out, idx, vals, P, pair_sample=pair_sample(rows)),
        "windows": lambda: windowed(out, idx, vals, on),
        "windows, hot row": lambda: windowed(out, idx, vals, on, hot=True),
        "direct, shared reserved": lambda: windowed(out, idx, vals, off),
        "direct, none reserved": lambda: windowed(out, idx, vals, off, reserve=False),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals)}
    row = {"dtype": "float32", "rows": rows, "dist": dist, "partitions": P, "err": {}}
    for name, fn in calls.items():
        row["err"][name] = err = float((fn().double() - ref).norm() / ref.norm())
        # plain atomics add a hot row's values one by one
        assert err < 1e-5 or dist == "hot" and name.startswith(("direct", "inductor")), \
            (name, row)
    row["shared bytes"] = {str(k): v[0] for k, v in _checked.items()}
    row.update(rounds(calls, ROUNDS))
    return row


FLUSH_CELLS = tuple((rows, d) for rows in (1024, 4096, 16384, 32768, 65536) for d in DISTS)


def flush_cell(rows: int, dist: str) -> dict:
    """``--flush``: ``scatter_shared`` storing a partial a program (``_total`` adding them)
    against adding its sums to a copy of the output with atomics, fp32."""
    out, idx, vals = cell_data(torch.float32, 0, rows, dist)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    calls = {"flush": lambda: shared_sums_index_add(out, idx, vals, flush=True)}
    if rows <= SHARED_PLANE:
        calls["partials"] = lambda: shared_sums_index_add(out, idx, vals, flush=False)
    row = {"dtype": "float32", "rows": rows, "dist": dist, "err": {}}
    for name, fn in calls.items():
        row["err"][name] = err = float((fn().double() - ref).norm() / ref.norm())
        assert err < 1e-5, (name, row)
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    flush = "--flush" in sys.argv
    if flush:
        sys.argv.remove("--flush")
    run_cells(__doc__, "probe_window_flush.json", FLUSH_CELLS if flush else CELLS,
              flush_cell if flush else cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64", flags=" --flush" if flush else "", script="probe_window_flush")


if __name__ == "__main__":
    main()
