"""Accumulating scatters: eager, compiled, Inductor's partitioned scatter, commrt.

    python benchmarks/bench_scatter.py [--out-dir benchmarks/results]
    python benchmarks/bench_scatter.py --grid [--workers 12] [--force] [--widths 0,1,4,16]
        [--rows 1024] [--update]

Default: three index_add into three buffers, values float32 [1,000,000 x 100], int64
indices drawn uniformly from 0..k, output [501 x 100]; median ms of
``triton.testing.do_bench``. ``--grid``: every row width, output size, index distribution,
dtype and op (``grid``), each call timed in a CUDA graph; ``--widths``/``--rows``/``--ops``/
``--dtypes`` run part of it, and ``--update`` merges those cells into the grid file already there.
``--grid --ops scatter_add``: the same grid of ``scatter_add`` (a row index broadcast along
the row, or 1-D values), written to its own file (``scatter_add_grid_<device>``).
``--grid --dtypes int32,int64``: integer values (token counts, histograms), summed exactly by
every column, in a file of their own (``scatter_int_grid_<device>``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import queue
import statistics
import sys
import threading
import time
import types
import zlib

import torch
import triton

from commrt.bench import commit

KS = (0, 1, 3, 7, 15, 31, 63, 127, 255, 500)
SEED_ROWS = 501  # the seed benchmark's output rows


def three_scatters(o1, o2, o3, idx, v1, v2, v3):
    return o1.index_add(0, idx, v1), o2.index_add(0, idx, v2), o3.index_add(0, idx, v3)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--out-dir", default="benchmarks/results")
    ap.add_argument("--grid", action="store_true", help="the grid (see grid)")
    ap.add_argument("--workers", type=int, default=12, help="--grid: compiling processes")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)),
                    help="--grid: row widths (0: 1-D values)")
    ap.add_argument("--rows", default=None,
                    help=f"output rows (default {SEED_ROWS}; --grid: a list, default every size)")
    ap.add_argument("--ops", default=",".join(GRID_OPS),
                    help=f"--grid: ops, of {', '.join(OPS)}")
    ap.add_argument("--dtypes", default=",".join(DTYPES),
                    help=f"--grid: value dtypes, of {', '.join(ALL_DTYPES)} (integers apart)")
    ap.add_argument("--update", action="store_true",
                    help="--grid: keep the other cells of the grid file already there")
    ap.add_argument("--force", action="store_true",
                    help="--grid: add a column with every scatter given to commrt's kernels")
    ap.add_argument("--budget-s", type=float, default=230.0,
                    help="--grid: groups not started by then are listed as not run")
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.grid:
        grid(args)
    else:
        seed(args)


def seed(args) -> None:
    """The three contended index_add of the default setup, over k."""
    import torch._inductor.config as ic

    import commrt.fx

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    vals = [torch.randn(args.n, args.d, device=dev, generator=g) for _ in range(3)]
    outs = [torch.zeros(int(args.rows or SEED_ROWS), args.d, device=dev) for _ in range(3)]
    variants = {
        "eager": lambda: three_scatters,
        "compiled": lambda: torch.compile(three_scatters),
        "inductor partitioned": lambda: torch.compile(three_scatters),
        "commrt": lambda: torch.compile(three_scatters),
    }
    idxs = {k: torch.randint(0, k + 1, (args.n,), device=dev, generator=g) for k in KS}
    refs = {k: three_scatters(*outs, idxs[k], *vals) for k in KS}
    rows = {k: {"k": k, "ms": {}, "max_rel_err": {}} for k in KS}
    for name, make in variants.items():  # one compile per variant: shapes never change
        torch._dynamo.reset()
        patches = {"fx_graph_cache": False}
        if name == "inductor partitioned":
            patches["partitioned_scatter_enabled"] = True
        with ic.patch(patches), (commrt.fx.installed(fuse_rmsnorm=False, overlap=False,
                                                     partitioned_scatter=True)
                                 if name == "commrt" else contextlib.nullcontext()):
            fn = make()
            for k in KS:
                got = fn(*outs, idxs[k], *vals)
                rows[k]["max_rel_err"][name] = max(float((a - b).norm() / b.norm())
                                                   for a, b in zip(got, refs[k], strict=True))
                rows[k]["ms"][name] = triton.testing.do_bench(
                    lambda fn=fn, idx=idxs[k]: fn(*outs, idx, *vals), return_mode="median")
        if name == "commrt":
            report = [r.__dict__ for n, r in commrt.fx.last_reports if n == "partitioned_scatter"]
            print(f"commrt pass: {report}", flush=True)
    rows = [rows[k] for k in KS]
    for row in rows:
        best_compiled = min(row["ms"]["compiled"], row["ms"]["inductor partitioned"])
        row["commrt_over_best_compiled"] = row["ms"]["commrt"] / best_compiled
        print(f"k={row['k']:>3} " + "  ".join(f"{n} {v:.3f}" for n, v in row["ms"].items())
              + f"  commrt/best {row['commrt_over_best_compiled']:.2f}  max err "
              + f"{max(row['max_rel_err'].values()):.1e}", flush=True)
        assert max(row["max_rel_err"].values()) < 1e-4, row
    name = torch.cuda.get_device_name().replace(" ", "_")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"scatter_{name}.json")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv),
            "commit": commit(), **vars(args)}
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows, "commrt_pass": report}, f, indent=1)
    print(f"wrote {path}", flush=True)


# The grid: value shapes (0 = 1-D values), output rows, index distributions, dtypes, ops.
# About 4M value elements a cell (fewer indices for wide rows); outputs over 64M elements
# (100 x 1M, 1024 x 1M, 4096 x 64K, 4096 x 1M) are left out: their copy alone is the cell.
WIDTHS = (0, 1, 4, 16, 100, 1024, 4096)
ROWS = (8, 1024, 65536, 1 << 20)
DISTS = ("uniform", "skewed", "hot")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Integer values (token counts, histograms): asked for by --dtypes, written to a file of
# their own (``scatter_int_grid_<device>``); every column must sum them exactly
INT_DTYPES = {"int32": torch.int32, "int64": torch.int64}
ALL_DTYPES = {**DTYPES, **INT_DTYPES}
INT_VALUES = 8  # integer values drawn from -8..8, the output from -1024..1024
OPS = {"index_add": lambda o, i, v: o.index_add(0, i, v),
       "index_put": lambda o, i, v: o.index_put((i,), v, accumulate=True),
       "scatter_add": lambda o, i, v: o.scatter_add(
           0, i.view(-1, 1).expand_as(v) if v.dim() > 1 else i, v)}
GRID_OPS = ("index_add", "index_put")  # the grid's; other ops go to a file of their own
VALUES, MAX_OUT = 1 << 22, 1 << 26
COLUMNS = ("eager", "compiled", "inductor partitioned", "commrt")
# Columns not run: one call of Inductor's bf16 index_put onto 8 rows of 1-D values did not
# finish in 8 minutes on an H200 (its atomics on 8 addresses), which no grid run can wait.
# Inductor's partitioned column of these groups was never reached, and is left out with it.
_STUCK = {"compiled": "one call did not finish in 8 minutes (bf16 atomics on 8 addresses)",
          "inductor partitioned": "not measured, left out with the compiled column"}
# Inductor lowers a scatter_add to the same atomics
UNRUN = {(op, "bfloat16", w, 8): _STUCK for op in ("index_put", "scatter_add") for w in (0, 1)}
# graphs of a column's calls, replayed in turn: a slowdown that passes (the same callable
# read 25.4 and 48.6 µs, timed twice in one H100 grid run at 89f4a66) falls on one graph
# of five, not on the cell
GRAPHS = 5
GRAPH_MS, GRAPH_CALLS, SIZING_CALLS = 2.0, 50, 5  # a graph's device time, its most calls
SLOW_MS = 1000.0  # a call this slow is not timed again: its call while compiling stands
# commrt's error: at most this or 1.5x compiled's (integers: none)
TOL = {"float32": 1e-4, "bfloat16": 2e-2, **dict.fromkeys(INT_DTYPES, 0.0)}
# ... or 3x where the commrt column is the compiled column's own graph (the rule left the
# scatter to Inductor), whose atomics add in another order each call: two calls of one bf16
# graph on a hot row differed 1.6x (scatter_grid_NVIDIA_H200.md, 2026-11-25), as in
# tests/test_gpu_scatter.py
SAME_GRAPH_SLACK = 3.0
# dtypes where every column, not commrt's alone, must meet TOL (integers: the exact sum)
EXACT_COLUMNS = ("float32", *INT_DTYPES)
# errors a column records a cell (its first call's, then more calls on the same data) where
# a call takes under ERR_CALL_MS: atomics add in another order each call, so that one
# call's error against another column's says little where they differ by a few percent
ERR_CALLS, ERR_CALL_MS = 5, 100.0
# The grid's GPU lock (a reentrant lock of its workers, which share one GPU): held by the
# GPU steps of a compile (the data and its float64 sums, Inductor's autotuning benchmarks,
# the eager column's first call, every column's checked calls on each distribution; not a
# compiled column's first call, whose compile would hold it for seconds) and by each
# group's timing, so that no kernel is benchmarked or timed beside another worker's. It
# keeps other workers' compiles off the GPU, not off the CPU, where Inductor's benchmarks
# of µs kernels are bound by the host's launches. Without it, one H100 grid run
# (benchmarks/results/scatter_grid_w40_56_rows1024_unlocked_NVIDIA_H100_80GB_HBM3.json,
# 14a69bc) benchmarked a reduction of commrt's graph of Inductor's partitions at 113-117 µs
# a config where the other column's compile read 11-12, chose the config that read 42, and
# timed that graph at 43.6 µs against 14.8 for the same graph built by Inductor's pass
# (bf16 rows of 56 into 1,024 rows, uniform); a user's compile has the GPU to itself
_GPU_LOCK = None


def gpu_turn() -> contextlib.AbstractContextManager:
    """The grid's GPU lock in a grid worker, else nothing to wait for."""
    return _GPU_LOCK if _GPU_LOCK is not None else contextlib.nullcontext()


def grid_groups(ops=GRID_OPS, dtypes=tuple(DTYPES), widths=WIDTHS,
                rows=ROWS) -> list[tuple]:
    """(op, dtype, width, rows): one compile per column serves the three distributions."""
    return [(op, dt, w, r) for op in ops for dt in dtypes for w in widths for r in rows
            if r * max(1, w) <= MAX_OUT]


def selected_groups(args) -> list[tuple]:
    """The groups that ``--ops``/``--dtypes``/``--widths``/``--rows`` select."""
    rows = tuple(int(r) for r in args.rows.split(",")) if args.rows else ROWS
    dtypes = tuple(args.dtypes.split(","))
    if unknown := [d for d in dtypes if d not in ALL_DTYPES]:
        raise SystemExit(f"--dtypes: {', '.join(unknown)} not one of {', '.join(ALL_DTYPES)}")
    if len({d in INT_DTYPES for d in dtypes}) > 1:
        raise SystemExit("--dtypes: integer and floating dtypes go to files of their own; "
                         "run them apart")
    return grid_groups(tuple(args.ops.split(",")), dtypes,
                       tuple(int(w) for w in args.widths.split(",")), rows)


def grid_indices(dist: str, rows: int, n: int, g) -> torch.Tensor:
    """uniform; skewed: 90% into the first 1% of rows; hot: half into one row."""
    idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
    if dist == "skewed":
        few = torch.randint(0, max(1, rows // 100), (n,), device="cuda", generator=g)
        idx = torch.where(torch.rand(n, device="cuda", generator=g) < 0.9, few, idx)
    elif dist == "hot":
        hot = torch.rand(n, device="cuda", generator=g) < 0.5
        idx = torch.where(hot, torch.full_like(idx, rows // 3), idx)
    return idx


class _ForceCommrt:
    """Inductor post-grad pass: every scatter to commrt's kernels (the --force column)."""

    def __call__(self, graph):
        from commrt.fx.scatter import partitioned_scatter

        partitioned_scatter(graph, rule=lambda *a: ("commrt", "forced"))

    def uuid(self):
        return b"commrt-scatter-forced"


def column_fn(op: str, name: str):
    """``OPS[op]`` as a function of its own code object for column ``name`` (Dynamo caches
    compiled graphs by code object: two columns of one code would share one graph)."""
    code = OPS[op].__code__
    return types.FunctionType(code.replace(co_name=f"{op}_{name.replace(' ', '_')}"),
                              OPS[op].__globals__)


def _column(name: str, fn):
    """The callable of one column (to be called in ``_context(name)``)."""
    return fn if name == "eager" else torch.compile(fn, dynamic=False)


def _context(name: str) -> contextlib.AbstractContextManager:
    """The settings one column compiles and runs in (entered on return)."""
    import torch._inductor.config as ic
    from torch._inductor.custom_graph_pass import CustomGraphPass

    import commrt.fx

    if name == "eager":
        return contextlib.nullcontext()
    patches = {"fx_graph_cache": False}
    ctx = contextlib.nullcontext()
    if name == "inductor partitioned":
        patches["partitioned_scatter_enabled"] = True
    elif name == "commrt":
        ctx = commrt.fx.installed(fuse_rmsnorm=False, overlap=False, partitioned_scatter=True)
    elif name == "commrt kernels":
        force = type("ForceCommrt", (_ForceCommrt, CustomGraphPass), {})()
        patches["post_grad_custom_post_pass"] = force
    stack = contextlib.ExitStack()
    stack.enter_context(ic.patch(patches))
    stack.enter_context(ctx)
    return stack


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).norm() / ref.norm())


def group_data(group: tuple) -> tuple:
    """A group's output, values and indices of each distribution (seeded by the group)."""
    op, dt, width, rows = group
    dtype, n = ALL_DTYPES[dt], VALUES // max(1, width)
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(group).encode()))
    shape = (rows,) if width == 0 else (rows, width)
    if dt in INT_DTYPES:
        out = torch.randint(-128 * INT_VALUES, 128 * INT_VALUES + 1, shape, device="cuda",
                            generator=g, dtype=dtype)
        vals = torch.randint(-INT_VALUES, INT_VALUES + 1, (n, *shape[1:]), device="cuda",
                             generator=g, dtype=dtype)
    else:
        out = torch.randn(shape, device="cuda", generator=g).to(dtype)
        vals = torch.randn((n, *shape[1:]), device="cuda", generator=g).to(dtype)
    return out, vals, {d: grid_indices(d, rows, n, g) for d in DISTS}


def compile_group(group: tuple, columns: tuple) -> dict:
    """A group's data, its columns compiled (one function each, so that Dynamo keeps one
    graph a column) and its cells' errors against float64. Where commrt's rule leaves the
    scatter to Inductor's plain lowering, the commrt column is the compiled column's
    callable (the pass changes nothing). A column that raises is recorded in each cell's
    ``failed`` (its times and errors NaN); the others go on."""
    op, dt, width, rows = group
    with gpu_turn():
        out, vals, idxs = group_data(group)
        # index_put(accumulate) and index_add sum alike; float64 index_add is the faster
        refs = {d: out.double().index_add(0, idxs[d], vals.double()) for d in DISTS}
        torch.cuda.synchronize()
    n = vals.shape[0]
    cells = [{"op": op, "dtype": dt, "width": width, "rows": rows, "n": n, "dist": d,
              "ms": {}, "err": {}, "compile_s": {}, "failed": {}} for d in DISTS]
    fns = {}
    for name in columns:
        fn = column_fn(op, name)
        t0 = time.perf_counter()
        if name in UNRUN.get(group, ()):
            for cell in cells:
                cell.setdefault("not run", {})[name] = UNRUN[group][name]
                cell["ms"][name] = cell["err"][name] = float("nan")
            continue
        try:
            with autotune_log() as tuned:
                fns[name] = _compile_column(name, fn, cells, (out, vals, idxs, refs),
                                            fns.get("compiled"))
            for cell in cells:
                cell.setdefault("autotuned", {})[name] = tuned
        except Exception as exc:  # noqa: BLE001 (recorded in the cells, the group goes on)
            _failed(cells, name, exc)
        print(f"  {grid_name(group)}: {name} ready in {time.perf_counter() - t0:.1f} s",
              flush=True)
    for cell in cells:
        err = cell["err"]
        ran = [e for e in err.values() if e == e]
        compiled = err["compiled"] if err["compiled"] == err["compiled"] else 0.0
        same = fns.get("commrt") is not None and fns.get("commrt") is fns.get("compiled")
        cell["wrong"] = not cell["failed"] and not (
            err["commrt"] <= max(TOL[dt], (SAME_GRAPH_SLACK if same else 1.5) * compiled)
            and (dt not in EXACT_COLUMNS or max(ran) <= TOL[dt]))
    return {"group": group, "cells": cells, "fns": fns, "data": (out, vals, idxs)}


@contextlib.contextmanager
def autotune_log():
    """The Triton kernels Inductor autotunes meanwhile (at a compiled graph's first call),
    as ``{"kernel", "chose", "ms"}`` (each config's benchmarked ms): Inductor times its
    pointwise configs far from the speed they run at in a graph, and two compiles of one
    graph can choose differently (``probe_compiles.py``). Empty where nothing was
    autotuned, or where Inductor's cache held a choice made before. Each kernel's
    benchmarks hold the grid's GPU lock (``gpu_turn``)."""
    from torch._inductor.runtime import triton_heuristics as th

    tuned, base = [], th.CachingAutotuner.benchmark_all_configs

    def record(self, *args, **kwargs):
        with gpu_turn():
            timings = base(self, *args, **kwargs)
        ms = {str(launcher.config): t for launcher, t in timings.items()}
        tuned.append({"kernel": self.inductor_meta.get("kernel_name"),
                      "chose": min(ms, key=ms.get) if ms else None, "ms": ms})
        return timings

    th.CachingAutotuner.benchmark_all_configs = record
    try:
        yield tuned
    finally:
        th.CachingAutotuner.benchmark_all_configs = base


def _static_choice(group: tuple) -> tuple[str, str]:
    """What commrt's rule answers for a group's scatter (its shapes only)."""
    from commrt.fx.scatter_rule import decide

    op, dt, width, rows = group
    n = VALUES // max(1, width)
    # after decomposition both ops reach the pass as index_put, save Inductor's aten
    # fallback for a bf16 index_add (an fp16 one decomposes); scatter_add stays one (not
    # partitioned)
    index_put = op != "index_add" or ALL_DTYPES[dt] != torch.bfloat16
    return decide(rows, max(1, width), n, ALL_DTYPES[dt], index_put,
                  index_put and op != "scatter_add")


def _failed(cells: list, name: str, exc: Exception) -> None:
    for cell in cells:
        cell["failed"][name] = repr(exc)[:500]
        cell["ms"][name] = cell["err"][name] = float("nan")


def _compile_column(name: str, fn, cells: list, data: tuple, compiled=None):
    """One column of a group's cells compiled (returned), its errors, the commrt pass's
    decisions; ``compiled``: the compiled column's callable, which the commrt column is
    where the rule answers ``inductor``."""
    import commrt.fx

    out, vals, idxs, _ = data  # refs: _errors
    t0 = time.perf_counter()
    alias = None
    if name == "commrt" and compiled is not None:
        choice, why = _static_choice((cells[0]["op"], cells[0]["dtype"], cells[0]["width"],
                                      cells[0]["rows"]))
        if choice == "inductor":
            alias = compiled
            for cell in cells:
                cell["commrt decision"] = [f"scatter: inductor ({why}; the compiled column)"]
    f = alias or _column(name, fn)
    with _context(name):
        # compiles, then runs: Inductor's autotuning takes the GPU lock (autotune_log)
        with gpu_turn() if name == "eager" else contextlib.nullcontext():
            f(out, idxs[DISTS[0]], vals)
            torch.cuda.synchronize()
        with gpu_turn():
            _errors(name, f, cells, data)
        if name == "commrt" and alias is None:
            rep = [r for k, r in commrt.fx.last_reports if k == "partitioned_scatter"]
            for cell in cells:
                cell["commrt decision"] = rep[-1].decisions if rep else []
    torch.cuda.synchronize()
    for cell in cells:
        cell["compile_s"][name] = time.perf_counter() - t0
    return f


def _errors(name: str, f, cells: list, data: tuple) -> None:
    """Column ``name``'s call on each distribution: its time (``first_ms``) and its errors
    against float64 (``err``: the first call's; ``errs``: up to ``ERR_CALLS`` calls')."""
    out, vals, idxs, refs = data
    for cell, d in zip(cells, DISTS, strict=True):
        t1 = time.perf_counter()
        got = f(out, idxs[d], vals)
        torch.cuda.synchronize()
        first = cell.setdefault("first_ms", {})[name] = (time.perf_counter() - t1) * 1e3
        errs = [_rel_err(got, refs[d])]
        while first < ERR_CALL_MS and len(errs) < ERR_CALLS:
            errs.append(_rel_err(f(out, idxs[d], vals), refs[d]))
        cell["err"][name] = errs[0]
        cell.setdefault("errs", {})[name] = errs


def eager_ms(fn) -> float:
    """ms between CUDA events around one eager call of ``fn``, after a first call."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def graph_calls(ms: float) -> int:
    """Calls of ``ms`` each that fill a graph of ``GRAPH_MS`` (1 to ``GRAPH_CALLS``)."""
    return max(1, min(GRAPH_CALLS, int(GRAPH_MS / max(ms, 1e-3))))


def time_call(fn) -> tuple[float, str, list[float]]:
    """(median ms of one call, how, ms of each graph): ``GRAPHS`` CUDA graphs of as many
    calls as fill about ``GRAPH_MS`` of device time (at most ``GRAPH_CALLS``), captured
    apart, replayed in turn 10 times (3 for calls over 20 ms), the median of their
    medians (how: ``graph of N``, N calls a graph); ``eager`` events where a call cannot be
    captured; ``once``, one call's events, for a call over 50 ms (a contended scatter
    hundreds of times slower than the others in its cell). A call's device time comes from
    a graph of ``SIZING_CALLS`` calls: an eager call's events also time the host's
    launches (commrt's compiled column read 0.3-1 ms a call so, where its graph ran it in
    8-15 µs, and got graphs of 2-7 calls, each paying a graph launch, where Inductor's got
    8-21: ``benchmarks/results/probe_grid_gap_NVIDIA_H200.json``)."""
    from commrt.timing import time_eager, time_graphs

    dev = torch.device("cuda", torch.cuda.current_device())
    once = eager_ms(fn)
    if once > 50:
        return once, "once", [once]
    try:
        call = time_graphs(fn, dev, SIZING_CALLS, 3)[0] / 1e3 if once < GRAPH_MS else once
        ops = graph_calls(call)
        replays = 3 if call > 20 else 10
        each = [us / 1e3 for us in time_graphs(fn, dev, ops, replays, GRAPHS)]
        return statistics.median(each), f"graph of {ops}", each
    except Exception:  # noqa: BLE001 (a call that syncs or allocates outside the pool)
        torch.cuda.synchronize()
        ops = graph_calls(once)
        ms = time_eager(fn, dev, iters=max(3, ops * (3 if once > 20 else 10))) / 1e3
        return ms, "eager", [ms]


def time_group(state: dict) -> list[dict]:
    """Median ms of every column of a group (the caller holds the GPU alone)."""
    out, vals, idxs = state["data"]
    cells = state["cells"]
    for name, f in state["fns"].items():
        try:
            with _context(name):  # the compiled callable of compile_group: no new compile
                for cell, d in zip(cells, DISTS, strict=True):
                    first = cell.get("first_ms", {}).get(name, 0.0)
                    if first > SLOW_MS:  # seconds a call: its first call on the data stands
                        cell["ms"][name], how, each = first, "first call", [first]
                    else:
                        cell["ms"][name], how, each = time_call(
                            lambda f=f, i=idxs[d]: f(out, i, vals))
                    cell.setdefault("graphs_ms", {})[name] = each
                    cell.setdefault("timed", {})[name] = how
        except Exception as exc:  # noqa: BLE001 (recorded in the cells, the group goes on)
            _failed(cells, name, exc)
    return cells


def grid_name(group: tuple) -> str:
    op, dt, w, r = group
    return f"{op} {dt} width {w or '1-D'} rows {r}"


def _grid_worker(tasks, columns: tuple, q, lock, barrier, deadline: float) -> None:
    """Compiles groups from ``tasks`` (in parallel with the other workers) until none is
    left or the deadline passes, waits until every worker has (no compile, nor Inductor's
    autotuning, shares the GPU with a timing), then times them one group at a time under
    ``lock`` (a reentrant lock, also every GPU step of a compile's: ``gpu_turn``)."""
    global _GPU_LOCK
    _GPU_LOCK = lock
    torch.cuda.set_device(0)
    compiled = []
    while True:
        try:
            group = tasks.get_nowait()
        except queue.Empty:
            break
        if time.time() > deadline:
            q.put({"group": group, "not run": "time budget"})
            continue
        try:
            compiled.append(compile_group(group, columns))
        except Exception as exc:  # noqa: BLE001 (recorded in the results, the grid goes on)
            q.put({"group": group, "error": repr(exc)[:500]})
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=max(60.0, deadline - time.time() + 240))
    while compiled:
        state = compiled.pop(0)
        try:
            with lock:
                q.put({"group": state["group"], "cells": time_group(state)})
        except Exception as exc:  # noqa: BLE001 (recorded in the results, the grid goes on)
            q.put({"group": state["group"], "error": repr(exc)[:500]})
        del state
        torch.cuda.empty_cache()
    q.put(None)


def grid(args) -> None:
    """The groups on ``args.workers`` processes that compile in parallel, then time one
    group at a time with the GPU to itself; results written after each group."""
    import torch.multiprocessing as mp

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    columns = COLUMNS + (("commrt kernels",) if args.force else ())
    groups = selected_groups(args)
    start = time.time()
    meta = grid_meta(args, columns, start, groups)
    kept = _kept_cells(args, meta, groups)
    ctx = mp.get_context("spawn")
    q, lock, tasks = ctx.Queue(), ctx.RLock(), ctx.Queue()
    # half-precision index_put first: Inductor leaves it to aten's sorting kernel, whose
    # calls on hot indices take the longest (compiling overlaps them)
    for group in sorted(groups, key=lambda g: (g[0], g[1]) != ("index_put", "bfloat16")):
        tasks.put(group)
    workers = max(1, min(args.workers, len(groups)))
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=_grid_worker, args=(tasks, columns, q, lock, barrier,
                                                    start + args.budget_s))
             for _ in range(workers)]
    for p in procs:
        p.start()
    done, results = 0, []
    while done < len(procs):
        try:
            item = q.get(timeout=5)
        except queue.Empty:
            if any(p.is_alive() for p in procs):
                continue
            break  # a worker died without saying so: its groups stay missing
        if item is None:
            done += 1
            continue
        results.append(item)
        print(f"[{time.time() - start:6.1f} s] {len(results)}/{len(groups)} "
              + grid_line(item), flush=True)
        write_grid(results, meta, args.out_dir, time.time() - start, kept)
    for p in procs:
        p.join()
    write_grid(results, meta, args.out_dir, time.time() - start, kept)
    cells = [c for r in results for c in r.get("cells", [])]
    bad, failed = [c for c in cells if c["wrong"]], [c for c in cells if c["failed"]]
    status = group_status(results, groups)
    print(f"grid: {len(results)} groups in {time.time() - start:.0f} s, {len(bad)} cells "
          f"wrong, {len(failed)} cells with a column that failed, "
          + ", ".join(f"{len(v)} groups {k}" for k, v in status.items()), flush=True)
    if bad or failed or any(status.values()):
        raise SystemExit(1)


def _kept_cells(args, meta: dict, groups: list) -> list[dict]:
    """--update: the cells of the grid file already there that this run does not redo
    (their runs listed in ``meta['merged']``)."""
    path = os.path.join(args.out_dir, meta["file"] + ".json")
    if not args.update or not os.path.exists(path):
        return []
    with open(path) as f:
        old = json.load(f)
    if old["meta"]["columns"] != meta["columns"]:
        raise SystemExit(f"--update: {path} has columns {old['meta']['columns']}, this run "
                         f"{meta['columns']}")
    mine = {tuple(g) for g in groups}
    kept = [c for c in old["cells"] if (c["op"], c["dtype"], c["width"], c["rows"]) not in mine]
    runs = old["meta"].get("merged", []) + [{k: old["meta"][k] for k in
                                             ("date", "command", "torch", "triton", "commit")
                                             if k in old["meta"]}]
    meta["merged"] = [r for r in runs if any(
        c.get("run", old["meta"]["command"]) == r["command"] for c in kept)]
    for c in kept:
        c.setdefault("run", old["meta"]["command"])
    return kept


def group_status(results: list, groups: list) -> dict[str, list]:
    """The groups without cells: failed (with the error), not run (time budget), and not
    reported (the grid stopped, or a worker died, before they finished)."""
    reported = {tuple(r["group"]) for r in results}
    return {"failed": [r for r in results if "error" in r],
            "not run": [r for r in results if "not run" in r],
            "not reported": [{"group": g, "not reported": "no result"} for g in groups
                             if tuple(g) not in reported]}


def grid_meta(args, columns: tuple, start: float, groups: list) -> dict:
    name = torch.cuda.get_device_name()
    return {"device": name, "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.date.today().isoformat(), "columns": list(columns),
            "command": "python " + " ".join(sys.argv), "values_a_cell": VALUES,
            "commit": commit(),
            "max_output_elements": MAX_OUT, "workers": args.workers, "graphs": GRAPHS,
            "start": start, "groups": [list(g) for g in groups],
            "ops": sorted({g[0] for g in groups}),
            "file": f"{grid_file(groups)}_{name.replace(' ', '_')}"}


def grid_file(groups: list) -> str:
    """The result file's stem: ``scatter_grid`` for the grid's ops, else the other ops'
    (``scatter_add_grid``); ``_int_grid`` for integer values."""
    other = sorted({g[0] for g in groups} - set(GRID_OPS))
    kind = "_int_grid" if any(g[1] in INT_DTYPES for g in groups) else "_grid"
    return ("_".join(other) if other else "scatter") + kind


def grid_line(item: dict) -> str:
    op, dt, w, r = item["group"]
    head = f"{op} {dt} width {w or '1-D'} rows {r}:"
    if "cells" not in item:
        return f"{head} {item.get('error') or item.get('not run')}"
    failed = {f"{k}: {v}" for c in item["cells"] for k, v in c["failed"].items()}
    return head + "  ".join(
        f" {c['dist']} " + "/".join("FAILED" if k in c["failed"] else f"{v:.3f}"
                                    for k, v in c["ms"].items())
        + f" ({ratio(c):.2f}{' WRONG' if c['wrong'] else ''})" for c in item["cells"]) \
        + "".join(f"\n    failed {f}" for f in sorted(failed))


def ratio(cell: dict) -> float:
    """commrt over the faster compiled column that ran (NaN where neither did)."""
    ms = cell["ms"]
    ran = [ms[k] for k in ("compiled", "inductor partitioned") if ms[k] == ms[k]]
    return ms["commrt"] / min(ran) if ran else float("nan")


def needs_win(cell: dict) -> bool:
    """Both of Inductor's columns over 1.5x eager, or over 1.5x each other."""
    e, a, b = (cell["ms"][k] for k in ("eager", "compiled", "inductor partitioned"))
    if a != a or b != b:  # a column not run: slower than anything timed
        return True
    return min(a, b) > 1.5 * e or max(a, b) > 1.5 * min(a, b)


def write_grid(results: list, meta: dict, out_dir: str, elapsed: float,
               kept: list = ()) -> None:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, meta["file"])
    mine = [dict(c, run=meta["command"]) for r in results for c in r.get("cells", [])]
    cells = sorted([*kept, *mine],
                   key=lambda c: (c["op"], c["dtype"], c["width"], c["rows"], c["dist"]))
    for c in cells:
        c["commrt_over_best_compiled"] = ratio(c)
        c["needs_1.3x"] = needs_win(c)
    status = group_status(results, [tuple(g) for g in meta["groups"]])
    with open(path + ".json", "w") as f:
        json.dump({"meta": {**meta, "elapsed_s": elapsed}, "cells": cells,
                   **{k.replace(" ", "_"): v for k, v in status.items()}}, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(grid_markdown(cells, meta, elapsed, status))


def error_above(cell: dict) -> tuple[bool, bool]:
    """(commrt's first call's error over the compiled column's first call's, every call's
    of commrt over every call's of the compiled column), where both ran. Two columns of
    one distribution of errors part so, five calls each, one cell in 252."""
    errs = cell.get("errs") or {k: [v] for k, v in cell["err"].items()}
    mine, theirs = errs.get("commrt", []), errs.get("compiled", [])
    if not mine or not theirs or mine[0] != mine[0] or theirs[0] != theirs[0]:
        return False, False
    return mine[0] > theirs[0], min(mine) > max(theirs)


def grid_markdown(cells: list, meta: dict, elapsed: float, status: dict) -> str:
    """The cells, then one row a distribution for every group without cells (failed, not
    run, not reported), each saying so in every time column."""
    cols = meta["columns"]
    over = [c for c in cells if c["commrt_over_best_compiled"] > 1.05]
    failed = [c for c in cells if c.get("failed")]
    need = [c for c in cells if c["needs_1.3x"]]
    won = [c for c in need if c["commrt_over_best_compiled"] <= 1 / 1.3]
    spread = [c for c in cells if any(max(v) > 1.1 * min(v)
                                      for v in c.get("graphs_ms", {}).values())]
    above = [error_above(c) for c in cells]
    lines = [
        f"# Scatter grid: {meta['device']}", "",
        f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}, commit "
        f"{meta['commit']}, `{meta['command']}`, {elapsed:.0f} s"
        + "".join(f"; cells of other groups from `{r['command']}` ({r['date']}, "
                  + (f"commit {r['commit']}, " if "commit" in r else "")
                  + f"torch {r['torch']}, Triton {r['triton']})" for r in meta.get("merged", []))
        + f". Median ms of a call: the median of {meta.get('graphs', 1)} CUDA graphs of "
        "calls, captured apart and replayed in turn (`time_call`: as many calls a graph as "
        "fill 2 ms of device time, up to 50, `timed` in the json; `graphs_ms`: "
        "each graph's; `autotuned`: the kernels Inductor autotuned in each column's first "
        "call, each config's benchmarked ms and the one chosen, under the grid's GPU lock "
        "with every column's calls on the data (`gpu_turn`)); `*`: a "
        f"call over {SLOW_MS / 1e3:.0f} s (Inductor's bf16 atomics on contended indices), its "
        "first call on the data, not timed again. "
        f"{VALUES} value elements a cell; outputs over {MAX_OUT} elements left out. "
        "Where the commrt path is `inductor`, commrt = Inductor's choice (the compiled "
        "column's graph); `inductor_partitioned`: the graph of Inductor's partitioned "
        "scatter" + ("" if set(meta.get("ops", GRID_OPS)) <= set(GRID_OPS) else
                     " (Inductor's own partitioned pass matches index_put only: for other "
                     "ops its column compiles the compiled column's graph again)")
        + ". err: relative error against float64 (Frobenius); wrong: commrt's over "
        "both " + ", ".join(f"{k} {v:g}" for k, v in TOL.items()) + " and 1.5x the "
        f"compiled column's ({SAME_GRAPH_SLACK:g}x where commrt is the compiled column's "
        "graph: its atomics add in another order each call), or an fp32 column over "
        f"{TOL['float32']:g} or an integer column off the exact sum. err above compiled: "
        "cells where commrt's first call's error is over the compiled column's first "
        "call's, and where every call's of commrt is "
        f"over every call's of the compiled column (`errs`: up to {ERR_CALLS} calls a "
        f"column on the same data, where a call takes under {ERR_CALL_MS:g} ms; two "
        "columns of one distribution of errors part so in one cell of 252).", "",
        f"Cells: {len(cells)}; commrt over 1.05x the faster compiled column: {len(over)}; "
        f"cells where Inductor's columns are slow (need 1.3x): {len(need)}, commrt 1.3x "
        f"faster in {len(won)}; wrong: {sum(c['wrong'] for c in cells)}; err above "
        f"compiled: {sum(a for a, _ in above)} (first calls), {sum(b for _, b in above)} "
        "(every call); cells where one "
        f"column's graphs differ by over 10%: {len(spread)}; cells with a "
        f"column that failed (FAILED, its error in the commrt path column): {len(failed)}; "
        + "; ".join(f"groups {k}: {len(v)}" for k, v in status.items()) + ".", "",
        "| op | dtype | width | rows | dist | " + " | ".join(cols)
        + " | commrt / best compiled | needs 1.3x | commrt path | err compiled | err commrt |",
        "|" + "---|" * 5 + "---:|" * (len(cols) + 1) + "---|---|---:|---:|"]
    for c in cells:
        fails = c.get("failed", {})
        path = ",".join(sorted({d.split(": ")[1].split(" ")[0]
                                for d in c.get("commrt decision", [])})) or "none"
        path += "".join(f"; {k} failed: {_short(v)}" for k, v in fails.items())
        path += "".join(f"; {k} not run: {v}" for k, v in c.get("not run", {}).items())
        lines.append(
            f"| {c['op']} | {c['dtype']} | {c['width'] or '1-D'} | {c['rows']} | {c['dist']} | "
            + " | ".join("FAILED" if k in fails else "NOT RUN" if k in c.get("not run", {})
                         else f"{c['ms'][k]:.4f}"
                         + ("*" if c.get("timed", {}).get(k) == "first call" else "")
                         for k in cols)
            + f" | {c['commrt_over_best_compiled']:.2f} | {'yes' if c['needs_1.3x'] else ''}"
            f" | {path} | {c['err']['compiled']:.1e} | {c['err']['commrt']:.1e} |")
    for kind, items in status.items():
        for r in sorted(items, key=lambda r: tuple(r["group"])):
            op, dt, width, rows = r["group"]
            lines += [f"| {op} | {dt} | {width or '1-D'} | {rows} | {d} | "
                      + " | ".join([kind.upper()] * len(cols)) + " |  |  | "
                      + _short(r.get("error") or r.get("not run") or r["not reported"])
                      + " |  |  |" for d in DISTS]
    return "\n".join(lines) + "\n"


def _short(message: str) -> str:
    """An error message on one table cell: its first line, no pipes."""
    return message.replace("\\n", "\n").split("\n")[0].replace("|", "/")[:160]


if __name__ == "__main__":
    main()
