"""Why does the scatter grid read commrt's compiled graph slower than a probe does: its data,
or its way of timing?

One GPU. The grid at 3ee81bb read fp32 rows of 16 into 1,024 rows, uniform, at 13.3 µs in
each of its five graphs; ``probe_init_pdl.py`` read the same compiled graph at 11.4 (Inductor's
plain scatter 10.8 and 10.7 in the two), and no worker state reproduced the grid's
(``probe_grid_state.py``). The two differ in their data (the grid's ``group_data``, seeded
by the group, against the probes' ``cell_data``, seeded 0: other indices, so another plan
on the GPU) and their timing (the grid's ``time_call``: five graphs of up to 50 calls,
replayed in turn; the probes' one graph of 20). Here each cell's two compiled columns of
``index_put`` (commrt's, with the pass; Inductor's plain scatter) are timed on both data,
each in four ways: "graph 20" (one graph of 20 calls, 15 replays), "graphs 5x20" (five
graphs of 20, in turn), "grid before" (five graphs of as many calls as one eager call's
events say fill 2 ms, as ``time_call`` sized them before) and "grid" (``time_call``); two
rounds taken in turn. µs a call; for five graphs, the median of the graphs' (``each``:
every graph's; ``calls``: the calls a graph). Then commrt's kernels,
each one's median µs over 20 eager calls (profiler), on both data::

    python benchmarks/probes/probe_grid_gap.py [--out probe_grid_gap.json] [--length]

``--length``: the grid's data only, one graph of ``LENGTHS`` calls each (10 replays), of
commrt's column as shipped, with its first launch a plain one ("plain first": each call's
first kernel waits for the call before in the stream, not as a programmatic dependent),
and of Inductor's ("compiled"); µs a call, two rounds taken in turn.

``--kernels``: the grid's data, each kernel's median µs over 20 eager calls (profiler) of
commrt's column and of Inductor's, for ``KERNEL_CELLS`` (cells of the grid at df45b10 over
1.05x the faster compiled column).

``--host``: the grid's data (``HOST_CELLS``: ``CELLS`` and a cell of each other route),
the host's time of an eager call (no graph) of commrt's
column, of the op it calls (``commrt::partitioned_index_put``), of the op with every
launch through Triton's own path (``symm_mem.launch.FAST`` off) and of Inductor's column
(a column's 200 calls run in its settings, ``bench_scatter._context``, entered once as a
user's would be; at df45b10 each call entered them): µs a call of 200 calls between two
synchronizations (median of five rounds taken in turn), and the 25 costliest functions
by own time over 200 calls of the op and of commrt's column (cProfile), in the log.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
from probe_init_pdl import compiled
from probe_narrow_costs import DEV, cell_data, kernel_us, run_cells

from commrt.symm_mem import launch
from commrt.timing import time_graphs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_scatter as bs  # noqa: E402

ROUNDS = 2
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(F32, 16, 1024, "uniform"), (F32, 100, 1024, "uniform"),
         (B16, 100, 1024, "uniform"), (B16, 4, 65536, "uniform"),
         (F32, 16, 1024, "skewed")]
# --host also takes the other routes: the few-rows, spread and shared-sums kernels
HOST_CELLS = CELLS + [(F32, 16, 8, "uniform"), (F32, 4, 1024, "uniform"),
                      (F32, 0, 1024, "uniform"), (F32, 0, 65536, "uniform")]
COLUMNS = ("commrt", "compiled")
KERNEL_CELLS = [(B16, 100, 1024, "uniform"), (F32, 16, 1024, "uniform"),
                (B16, 4, 65536, "uniform"), (F32, 1, 65536, "uniform"),
                (B16, 100, 1024, "skewed")]
LENGTHS = (5, 10, 20, 50, 100)


def _in_context(name: str, f):
    """``f`` called in column ``name``'s settings (``bench_scatter._context``)."""
    def call(*a):
        with bs._context(name):
            return f(*a)
    return call


def _ways(fn) -> dict:
    """{way: (µs a call, each graph's µs, calls a graph)} of ``fn`` timed each way."""
    one = time_graphs(fn, DEV, 20, 15, 1)
    five = time_graphs(fn, DEV, 20, 10, bs.GRAPHS)
    once = bs.eager_ms(fn)  # the grid's measure of a call before time_call's sizing
    ops = bs.graph_calls(once)
    before = time_graphs(fn, DEV, ops, 10, bs.GRAPHS)
    ms, how, each = bs.time_call(fn)
    assert how.startswith("graph of "), how
    return {"graph 20": (one[0], one, 20), "graphs 5x20": (statistics.median(five), five, 20),
            "grid before": (statistics.median(before), before, ops),
            "grid": (ms * 1e3, [x * 1e3 for x in each], int(how.split()[-1]))}


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    torch._dynamo.reset()
    group = ("index_put", str(dtype)[6:], width, rows)
    g_out, g_vals, g_idxs = bs.group_data(group)
    p_out, p_idx, p_vals = cell_data(dtype, width, rows, dist)
    data = {"grid data": (g_out, g_idxs[dist], g_vals), "probe data": (p_out, p_idx, p_vals)}
    fns = {name: bs._column(name, bs.column_fn("index_put", name)) for name in COLUMNS}
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist, "err": {}}
    for d, (out, idx, vals) in data.items():  # compile (dynamic=False: one graph a column)
        ref = out.double().index_put((idx,), vals.double(), accumulate=True)
        for name, f in fns.items():
            with bs._context(name):
                got = f(out, idx, vals)
            row["err"][f"{d}, {name}"] = bs._rel_err(got, ref)
    times: dict = {}
    for _ in range(ROUNDS):
        for d, args in data.items():
            for name, f in fns.items():
                with bs._context(name):
                    for way, got in _ways(lambda f=f, a=args: f(*a)).items():
                        times.setdefault(f"{d}, {name}, {way}", []).append(got)
    for key, got in times.items():
        row[key] = [round(us, 2) for us, _, _ in got]
        row[key + " each"] = [[round(x, 2) for x in each] for _, each, _ in got]
        row[key + " calls"] = [ops for _, _, ops in got]
    for d, args in data.items():
        f = fns["commrt"]
        with bs._context("commrt"):
            row[f"{d}, kernels"] = {k: round(v, 2) for k, v in kernel_us(
                lambda f=f, a=args: f(*a), names=None).items()}
    return row


def length_cell(dtype, width: int, rows: int, dist: str) -> dict:
    torch._dynamo.reset()
    out, vals, idxs = bs.group_data(("index_put", str(dtype)[6:], width, rows))
    idx = idxs[dist]
    f = _in_context("compiled", bs._column("compiled", bs.column_fn("index_put", "compiled")))
    variants = {"shipped": compiled(False), "plain first": compiled(True),
                "compiled": lambda o, i, v, P: f(o, i, v)}
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "err": {k: bs._rel_err(v(out, idx, vals, 1), ref) for k, v in variants.items()}}
    for _ in range(ROUNDS):
        for ops in LENGTHS:
            for name, v in variants.items():
                us = time_graphs(lambda v=v: v(out, idx, vals, 1), DEV, ops, 10, 1)[0]
                row.setdefault(f"{name}, {ops} calls", []).append(round(us, 2))
    return row


def host_cell(dtype, width: int, rows: int, dist: str) -> dict:
    from commrt.fx.scatter import copies

    torch._dynamo.reset()
    out, vals, idxs = bs.group_data(("index_put", str(dtype)[6:], width, rows))
    idx = idxs[dist]
    P = copies(rows, max(1, width), idx.numel(), dtype,
               torch.cuda.get_device_properties(DEV).total_memory)
    op = torch.ops.commrt.partitioned_index_put
    fns = {name: bs._column(name, bs.column_fn("index_put", name)) for name in COLUMNS}

    def triton_path():
        launch.FAST = False
        try:
            return op(out, idx, vals, P)
        finally:
            launch.FAST = True

    # name: (the column whose settings its calls run in: eager's are none; the call)
    calls = {"commrt": ("commrt", lambda: fns["commrt"](out, idx, vals)),
             "op": ("eager", lambda: op(out, idx, vals, P)),
             "op, Triton's launch path": ("eager", triton_path),
             "compiled": ("compiled", lambda: fns["compiled"](out, idx, vals))}
    times: dict = {name: [] for name in calls}
    for r in range(6):  # the first round compiles and warms, untimed
        for name, (column, fn) in calls.items():
            with bs._context(column):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200 if r else 2):
                    fn()
                torch.cuda.synchronize()
            if r:
                times[name].append((time.perf_counter() - t0) / 200 * 1e6)
    for name in ("op", "commrt"):
        column, fn = calls[name]
        with bs._context(column):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                fn()
            prof.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(f"{name}:\n{text.getvalue()}", flush=True)
    return {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
            "partitions": P, **{k: round(statistics.median(v), 1) for k, v in times.items()},
            "spread": {k: [round(min(v), 1), round(max(v), 1)] for k, v in times.items()}}


def kernels_cell(dtype, width: int, rows: int, dist: str) -> dict:
    torch._dynamo.reset()
    out, vals, idxs = bs.group_data(("index_put", str(dtype)[6:], width, rows))
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist}
    for name in COLUMNS:
        f = bs._column(name, bs.column_fn("index_put", name))
        with bs._context(name):
            row[name] = {k: round(v, 2) for k, v in kernel_us(
                lambda f=f: f(out, idxs[dist], vals), names=None).items()}
            row[name + ", graph 20"] = round(time_graphs(
                lambda f=f: f(out, idxs[dist], vals), DEV, 20, 15, 1)[0], 2)
    return row


# flag: (result file, cells, cell function, unit)
PARTS = {
    "--kernels": ("probe_grid_gap_kernels.json", KERNEL_CELLS, kernels_cell,
                  "µs: each kernel's median over 20 eager calls (profiler); graph 20: a call "
                  "in one CUDA graph of 20 calls"),
    "--host": ("probe_grid_gap_host.json", HOST_CELLS, host_cell,
               "µs of host time a call, eager (200 calls between two synchronizations, "
               "median of five rounds)"),
    "--length": ("probe_grid_gap_length.json", CELLS, length_cell,
                 f"µs a call in one CUDA graph of that many calls (10 replays), {ROUNDS} "
                 "rounds"),
}


def main() -> None:
    for flag, (out, cells, fn, unit) in PARTS.items():
        if flag in sys.argv:
            sys.argv.remove(flag)
            run_cells(__doc__, out, cells, fn, unit, f" {flag}", "probe_grid_gap")
            return
    run_cells(__doc__, "probe_grid_gap.json", CELLS, cell,
              f"µs a call ({ROUNDS} rounds, each way of timing once a round; see the "
              "docstring); kernels: median µs of each kernel over 20 eager calls")


if __name__ == "__main__":
    main()
