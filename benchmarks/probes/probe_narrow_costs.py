"""Where do the narrow scatter's fixed costs go, and from how many adds an address do its
copies pay, by row width?

One GPU. The grid's fp32 cells that commrt's narrow kernels lose by 6-13% to Inductor's
plain scatter (1-D values into 65,536 rows, rows of 4 and 16) spend the same time in the
atomics; the rest is fixed cost. Two parts:

1. costs: for a few grid cells (4M value elements), the whole call and Inductor's in a
   CUDA graph; each kernel's own time from a profiler trace of 20 eager calls (``_init``
   plans on the GPU and copies the output, ``_scatter`` adds, ``_sum`` adds the copies);
   and the call with one copy, without PDL, without the second sample, without hot rows.
2. copies: fp32 uniform indices, 64-1024 values a row into 1,024 and 16,384 rows: the
   call with one copy against the call with up to ``partitions_for`` copies, with the
   plan's threshold at 128 (shipped) to 2,048 adds an address, and Inductor.

    python benchmarks/probes/probe_narrow_costs.py [--out result.json] [--parts costs,copies]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import statistics
import sys

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_narrow import narrow_index_add, state_numel
from commrt.fx.scatter_rule import partitions_for
from commrt.timing import time_graph

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_scatter import grid_indices  # noqa: E402

from commrt.bench import commit  # noqa: E402

DEV = torch.device("cuda")
KERNELS = ("_init", "_scatter", "_sum")


def graph_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return time_graph(fn, DEV, ops=20, replays=15)


def kernel_us(fn, calls: int = 20, names: tuple | None = KERNELS) -> dict:
    """Median µs of each of the kernels ``names`` over ``calls`` eager calls (0: none;
    ``names`` None: every kernel, its name cut to 60 characters)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {k: [] for k in names or ()}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            name = ev.name[:60] if names is None else ev.name
            if names is None or name in times:
                times.setdefault(name, []).append(ev.time_range.elapsed_us())
    return {k: statistics.median(v) if v else 0.0 for k, v in times.items()}


def cell_data(dtype, width: int, rows: int, dist: str, values: int = 4 << 20):
    """The grid's data for one cell: (output, indices, values)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    n = values // max(1, width)
    shape = (rows,) if width == 0 else (rows, width)
    out = torch.randn(shape, device="cuda", generator=g).to(dtype)
    vals = torch.randn((n, *shape[1:]), device="cuda", generator=g).to(dtype)
    idx = grid_indices(dist, rows, n, g)
    return out, idx, vals


def rounds(calls: dict, n: int) -> dict:
    """Each of ``calls`` timed by ``graph_us`` in ``n`` rounds taken in turn: {name: median}
    and, under "spread", {name: [least, most]}."""
    times = {k: [] for k in calls}
    for _ in range(n):
        for name, fn in calls.items():
            times[name].append(graph_us(fn))
    row = {k: round(statistics.median(v), 2) for k, v in times.items()}
    row["spread"] = {k: [round(min(v), 2), round(max(v), 2)] for k, v in times.items()}
    return row


def checked_errors(calls: dict, ref: torch.Tensor, bound: float, checked=lambda name: True,
                   deterministic: bool = False) -> dict:
    """{name: relative error against ``ref``} of one call of each of ``calls``; those that
    ``checked(name)`` must be under ``bound`` and, ``deterministic``, the same bits again."""
    errors = {}
    for name, fn in calls.items():
        got = fn()
        errors[name] = err = float((got.double() - ref).norm() / ref.norm())
        if checked(name):
            assert err < bound, (name, err)
            if deterministic:
                assert torch.equal(fn(), got), (name, "not deterministic")
    return errors


def variant_rounds(dtype, width: int, rows: int, dist: str, variants: dict, n: int,
                   checks: int = 1) -> dict:
    """One grid cell (``cell_data``) with the copies the pass gives: each of ``variants``
    (name: ``fn(out, idx, vals, partitions)``) checked ``checks`` times against float64
    (errors under "err"), then ``rounds`` of them and Inductor's scatter (``index_put``)."""
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P, "err": {}}
    calls = {name: lambda fn=fn: fn(out, idx, vals, P) for name, fn in variants.items()}
    for name, fn in calls.items():
        for _ in range(checks):
            row["err"][name] = err = float((fn().double() - ref).norm() / ref.norm())
            assert err < (1e-5 if dtype == torch.float32 else 2e-2), (name, row)
    f = inductor("index_put")
    row.update(rounds({**calls, "inductor": lambda: f(out, idx, vals)}, n))
    return row


def checked_rounds(dtype, width: int, rows: int, dist: str, variants: dict, n: int,
                   dropped: dict | None = None) -> dict:
    """``variant_rounds``, leaving out of ``variants`` a variant over its error bound (its
    error under "dropped", with those in ``dropped`` already)."""
    dropped = {} if dropped is None else dropped
    while True:
        try:
            row = variant_rounds(dtype, width, rows, dist, variants, n)
            return {**row, "dropped": dropped}
        except AssertionError as e:
            name, bad = e.args[0]
            dropped[name] = bad["err"][name]
            del variants[name]


def meta(command: str, unit: str) -> dict:
    """The device, versions, date and commit of a probe's result (GIT_COMMIT names the
    commit where the copy is not a git checkout), its command and unit."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "commit": commit(), "command": command,
            "unit": unit}


def run_cells(doc: str, default_out: str, cells, cell, unit: str, flags: str = "",
              script: str = "") -> None:
    """A probe's main: ``cell(*c)`` for each of ``cells``, each row printed and the rows
    written to ``--out`` (with ``meta``; ``flags``: the probe's own options, for its
    command; ``script``: its name, where ``default_out`` does not give it) as they come,
    so that a time limit keeps them."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args()
    name = script or default_out.removesuffix(".json")
    result = {"meta": meta(f"python benchmarks/probes/{name}.py{flags}", unit), "cells": []}
    for c in cells:
        result["cells"].append(cell(*c))
        print(json.dumps(result["cells"][-1]), flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


def patched_op(module, name: str, **kw):
    """The op as the pass calls it, with the kernel entry ``module.name`` (which the op
    imports at each call) called with ``kw`` over the op's own keywords."""
    entry = getattr(module, name)

    def forced(*args, **given):
        return entry(*args, **{**given, **kw})

    def run(out, idx, vals, P):
        setattr(module, name, forced)
        try:
            return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
        finally:
            setattr(module, name, entry)
    return run


def old_option(ap) -> None:
    """``--old DIR`` and ``--old-commit C`` on ``ap``: an earlier commit's wide kernels
    (``old_scatter_kernels`` in ``DIR``, as ``probe_seed_ab``'s docstring makes them)."""
    ap.add_argument("--old", default=None, help="the earlier commit's modules")
    ap.add_argument("--old-commit", default=None, help="that commit, for the record")


def old_kernels(args):
    """(the earlier commit's ``old_scatter_kernels`` or None, the options for the command)."""
    if not args.old:
        return None, ""
    sys.path.insert(0, args.old)
    return (importlib.import_module("old_scatter_kernels"),
            f" --old old --old-commit {args.old_commit}")


def with_constants(module, op=None, launches=None, **values):
    """``op`` (None: the op as the pass calls it) with ``module``'s constants set to
    ``values`` for the call and restored after it (the module's launches, cached by shape
    in ``launches``, by default its ``_launches``, and the op's replays cleared before and
    after)."""
    launches = launches or getattr(module, "_launches", None)
    clear_launches = getattr(launches, "cache_clear", lambda: None)

    def clear():  # the module's launches, and the op's replays of the shipped ones
        clear_launches()
        pass_scatter.forget_shapes()

    def run(out, idx, vals, P):
        kept = {k: getattr(module, k) for k in values}
        clear()
        for k, v in values.items():
            setattr(module, k, v)
        try:
            if op is None:
                return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
            return op(out, idx, vals, P)
        finally:
            for k, v in kept.items():
                setattr(module, k, v)
            clear()
    return run


def cell_row(dtype, width: int, rows: int, dist: str, calls: dict, ref: torch.Tensor,
             checked, n_rounds: int, deterministic: bool = True) -> dict:
    """A probe's row for one cell: every call's error against ``ref`` (those ``checked``
    under the bound and, ``deterministic``, the same bits again), then ``n_rounds`` rounds
    of their times."""
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "err": checked_errors(
               calls, ref, 1e-5 if dtype == torch.float32 else 8e-3, checked,
               deterministic)}
    row.update(rounds(calls, n_rounds))
    return row


def op_kernels(variants: dict, dtype, width: int, rows: int, dist: str, P: int) -> dict:
    """Each kernel's µs (``kernel_us``, every kernel) in the calls of ``variants`` whose names
    start with "op", and in Inductor's plain scatter, on one grid cell's data."""
    out, idx, vals = cell_data(dtype, width, rows, dist)
    f = inductor("index_put")
    calls = {name: lambda fn=fn: fn(out, idx, vals, P)
             for name, fn in variants.items() if name.startswith("op")}
    calls["inductor"] = lambda: f(out, idx, vals)
    return {name: {k: round(v, 2) for k, v in kernel_us(call, names=None).items()}
            for name, call in calls.items()}


def _plain(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def _parted(o, i, v):  # the same op, compiled with Inductor's partitions
    return torch.index_put(o, (i,), v, accumulate=True)


def inductor_columns(out, idx, vals) -> tuple:
    """The grid's two compiled columns of ``index_put`` on one cell's data, each compiled
    apart (dynamo caches by code) and called once: (Inductor's plain scatter, its
    partitioned scatter)."""
    import torch._inductor.config as ic

    torch._dynamo.reset()
    plain, parted = torch.compile(_plain, dynamic=False), torch.compile(_parted, dynamic=False)
    with ic.patch({"fx_graph_cache": False}):
        plain(out, idx, vals)
    with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
        parted(out, idx, vals)
    return plain, parted


def ours(name: str) -> bool:
    """A column checked against its error bound: not one of Inductor's."""
    return not name.startswith("inductor")


def compiled_cell(dtype, width: int, rows: int, dist: str) -> tuple:
    """One grid cell's data (``cell_data``), the copies the pass gives it, its float64
    ``index_put`` and Inductor's two compiled columns (``inductor_columns``): (output,
    indices, values, copies, reference, plain, partitioned)."""
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    return (out, idx, vals, P, ref, *inductor_columns(out, idx, vals))


def inductor(op: str):
    torch._dynamo.reset()
    if op == "index_add":
        return torch.compile(lambda o, i, v: o.index_add(0, i, v), dynamic=False)
    return torch.compile(lambda o, i, v: torch.index_put(o, (i,), v, accumulate=True),
                         dynamic=False)


def copies_of(rows: int, n: int, width: int) -> int:
    memory = torch.cuda.get_device_properties(DEV).total_memory
    return partitions_for(rows, n, 4 * max(1, width), memory, narrow=True)


def plan(out, idx, vals, P: int, **kw) -> list:
    state = torch.empty(state_numel(), device=DEV, dtype=torch.int32)
    narrow_index_add(out, idx, vals, P, state=state, **kw)
    return state[:3].tolist()  # copies, error, hot rows


def costs(dtype, width: int, rows: int, dist: str, op: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = copies_of(rows, idx.numel(), width)
    f = inductor(op)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist, "op": op,
           "partitions": P, "plan": plan(out, idx, vals, P)}
    row["inductor"] = graph_us(lambda: f(out, idx, vals))
    row["output clone"] = graph_us(lambda: out.clone())
    variants = {"commrt": {}, "one copy": {"partitions": 1}, "no pdl": {"pdl": False},
                "no second sample": {"pair_sample": 0}, "no hot rows": {"hot": 0}}
    for name, kw in variants.items():
        kw = {"partitions": P, **kw}
        row[name] = graph_us(lambda kw=kw: narrow_index_add(out, idx, vals, **kw))
    row["kernels"] = kernel_us(lambda: narrow_index_add(out, idx, vals, P))
    return row


def copies(width: int, rows: int, per_row: int) -> dict:
    out, idx, vals = cell_data(torch.float32, width, rows, "uniform",
                               values=per_row * rows * max(1, width))
    P = copies_of(rows, idx.numel(), width)
    f = inductor("index_add")
    row = {"width": width, "rows": rows, "per_row": per_row, "partitions": P,
           "inductor": graph_us(lambda: f(out, idx, vals)),
           "one copy": graph_us(lambda: narrow_index_add(out, idx, vals, 1))}
    for pa in (128, 256, 512, 1024, 2048):
        row[f"per_address {pa}"] = graph_us(
            lambda pa=pa: narrow_index_add(out, idx, vals, P, per_address=pa))
        row[f"per_address {pa} copies"] = plan(out, idx, vals, P, per_address=pa)[0]
    return row


COST_CELLS = ((torch.float32, 0, 65536, "uniform", "index_add"),
              (torch.float32, 0, 65536, "skewed", "index_add"),
              (torch.float32, 4, 65536, "uniform", "index_add"),
              (torch.float32, 16, 65536, "uniform", "index_add"),
              (torch.float32, 16, 1024, "uniform", "index_add"),
              (torch.float32, 16, 1024, "skewed", "index_add"),
              (torch.bfloat16, 16, 65536, "uniform", "index_put"),
              (torch.bfloat16, 4, 1 << 20, "uniform", "index_put"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="probe_narrow_costs.json")
    ap.add_argument("--parts", default="costs,copies")
    args = ap.parse_args()
    result = {"meta": meta(f"python benchmarks/probes/probe_narrow_costs.py --parts {args.parts}",
                           "µs a call (median, CUDA graph of 20 calls); kernels: median µs of "
                           "each kernel over 20 eager calls (profiler)"),
              "costs": [], "copies": []}
    parts = args.parts.split(",")
    if "costs" in parts:
        for cell in COST_CELLS:
            result["costs"].append(costs(*cell))
            print(json.dumps(result["costs"][-1]), flush=True)
    if "copies" in parts:
        for width in (0, 4, 8, 16):
            for rows in (1024, 16384):
                for per_row in (64, 128, 256, 512, 1024):
                    if per_row * rows * max(1, width) <= 1 << 24:
                        result["copies"].append(copies(width, rows, per_row))
                        print(json.dumps(result["copies"][-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
