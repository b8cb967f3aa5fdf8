"""Where does the few-rows kernel's time go, its partials or their total, and would narrow
rows into a few output rows run faster as selects with a total spread over programs?

One GPU. ``scatter_few`` sums narrow rows (up to 4 elements) into up to 16 rows as
compares, a partial a program, then ``_total`` adds ``self`` and the partials in one
program. fp32 rows of 16 into 8 rows go to ``scatter_spread`` (1.09-1.10x Inductor's
partitions, uniform, in the grid); selects into ``[rows, block, columns]`` accumulators
took 13.4 µs there against Inductor's 12.4 (``probe_few_sums_NVIDIA_H200.json``), with a
total over 64-element blocks. Here, for 4M value elements, µs a call in a CUDA graph of
20 calls (median of five rounds taken in turn):

- each form of the partials alone: ``compare`` (the shipped ``_partial``), ``select``
  (``probe_few_sums``' selects: values a step, programs an SM, warps), ``prefetch`` (the
  selects with the next block loaded before the current one is summed);
- each total alone on those partials: ``one`` (the shipped few-rows ``_total``: one
  program, 4,096 partials' elements a step), ``grid B/T`` (programs of B output elements,
  T partials' elements a step);
- the whole call for each pair, the op as the pass calls it, and Inductor's partitions.

    python benchmarks/probes/probe_few_total.py [--out probe_few_total.json]
"""

from __future__ import annotations

import torch
import torch._inductor.config as ic
import triton
import triton.language as tl
from probe_few_sums import _select_partial
from probe_narrow_costs import cell_data, graph_us, run_cells

from commrt.dispatch.profile import sm_count
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_few import TILE, _partial, _total
from commrt.symm_mem.launch import next_pow2

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 8, "uniform"), (F32, 16, 8, "hot"), (F32, 16, 16, "uniform"),
         (BF16, 16, 8, "uniform"), (F32, 4, 8, "uniform"), (F32, 0, 8, "uniform"))
PARTIALS = {"compare": {"kind": "compare"},
            "select 4096": {"kind": "select", "tile": 4096},
            "select 8192 8/SM": {"kind": "select", "tile": 8192, "per_sm": 8},
            "select 2048 8/SM": {"kind": "select", "tile": 2048, "per_sm": 8},
            "prefetch 4096": {"kind": "prefetch", "tile": 4096},
            "prefetch 2048 8/SM": {"kind": "prefetch", "tile": 2048, "per_sm": 8},
            "prefetch 4096 8 warps": {"kind": "prefetch", "tile": 4096, "warps": 8}}
TOTALS = {"one": None, "grid 64/8192": (64, 8192), "grid 16/8192": (16, 8192),
          "grid 16/16384": (16, 16384), "grid 8/8192": (8, 8192)}
WHOLE = ("compare", "select 4096", "select 2048 8/SM", "prefetch 4096",
         "prefetch 2048 8/SM")


@triton.jit
def _prefetch_partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
                      DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr):
    # _select_partial with the next block's loads issued before the current block's selects
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    k = tl.arange(0, R)[:, None, None]
    c = tl.arange(0, DP)[None, None, :]
    s = tl.arange(0, SUB)[None, :, None]
    acc = tl.zeros([R, SUB, DP], tl.float32)
    bad_any = tl.zeros([1, SUB, 1], tl.int32)
    r = lo + s
    v = tl.load(vals + r * D + c, mask=(r < hi) & (c < D), other=0)
    i = tl.load(idx + r, mask=r < hi, other=0)
    for start in range(lo, hi, SUB):
        rm = (start + s) < hi
        r = start + SUB + s
        v_next = tl.load(vals + r * D + c, mask=(r < hi) & (c < D), other=0)
        i_next = tl.load(idx + r, mask=r < hi, other=0)
        i = tl.where(i < 0, i + rows, i)
        bad_any |= (rm & ((i < 0) | (i >= rows))).to(tl.int32)
        acc += tl.where(i == k, v.to(tl.float32), 0.0)
        v, i = v_next, i_next
    t = tl.sum(acc, axis=1)
    if tl.max(bad_any) > 0:
        t = tl.full([R, DP], float("nan"), tl.float32)
    rr = tl.arange(0, R)[:, None]
    cc = tl.arange(0, DP)[None, :]
    tl.store(part + (g * rows + rr) * D + cc, t, mask=(rr < rows) & (cc < D))


def partial(index, values, rows: int, kind: str, per_sm: int = 4, tile: int = 4096,
            warps: int = 4):
    """(the launch of one form of the partials, G, its partials)."""
    n = index.numel()
    D = max(1, values.numel() // max(1, n))
    R, DP = next_pow2(rows), next_pow2(D)
    sub = max(1, (TILE // DP) if kind == "compare" else tile // (R * DP))
    G = min(per_sm * sm_count(values.device), triton.cdiv(n, sub))
    part = torch.empty(G * rows * D, device=values.device, dtype=torch.float32)
    kernel = {"compare": _partial, "select": _select_partial,
              "prefetch": _prefetch_partial}[kind]
    args = (index, values, part, n, rows, triton.cdiv(n, G))
    meta = {"D": D, "R": R, "DP": DP, "SUB": sub, "WIDE": n * D >= 1 << 31,
            "num_warps": warps}
    return (lambda: kernel[(G,)](*args, **meta)), G, part


def total(self, part, G: int, form):
    """The launch of ``_total`` on ``G`` partials: one program (``form`` None) or
    ``(block, tile)``."""
    out = torch.empty_like(self)
    plane = self.numel()
    if form is None:
        pb = next_pow2(plane)
        gb = max(1, min(next_pow2(G), 4096 // pb))
    else:
        pb = min(next_pow2(plane), form[0])
        gb = max(1, min(next_pow2(G), form[1] // pb))
    grid = (triton.cdiv(plane, pb),)

    def run():
        _total[grid](self, part, out, G, plane, PB=pb, GB=gb, num_warps=4)
        return out
    return run


def _parted(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    torch._dynamo.reset()
    parted = torch.compile(_parted, dynamic=False)
    with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
        parted(out, idx, vals)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P, "programs": {}, "err": {}, "us": {}}
    calls = {"op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
             "inductor partitioned": lambda: parted(out, idx, vals)}
    bound = 1e-5 if dtype == F32 else 8e-3
    for pname, kw in PARTIALS.items():
        launch, G, part = partial(idx, vals, rows, **kw)
        row["programs"][pname] = G
        calls[pname] = launch
        for tname, form in TOTALS.items():
            t = total(out, part, G, form)
            if pname in ("compare", "select 2048 8/SM"):  # 4 and 8 programs an SM
                calls[f"{tname} (on {G})"] = t
            if pname in WHOLE:
                def whole(launch=launch, t=t):
                    launch()
                    return t()
                name = f"{pname} + {tname}"
                got = whole()
                row["err"][name] = err = float((got.double() - ref).norm() / ref.norm())
                assert err < bound, (name, err)
                assert torch.equal(whole(), got), (name, "not deterministic")
                calls[name] = whole
    times = {k: [] for k in calls}
    for _ in range(ROUNDS):
        for name, fn in calls.items():
            times[name].append(graph_us(fn))
    for name, v in times.items():
        v.sort()
        row["us"][name] = [round(v[len(v) // 2], 2), round(v[0], 2), round(v[-1], 2)]
    return row


def main() -> None:
    run_cells(__doc__, "probe_few_total.json", CELLS, cell,
              f"us: [median, least, most] of {ROUNDS} rounds, each µs a call in a CUDA graph "
              "of 20 calls; err: relative error against float64; programs: the partials")


if __name__ == "__main__":
    main()
