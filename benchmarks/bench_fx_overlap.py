"""Training step with collectives in the compiled graph: eager vs torch.compile with and
without overlap passes (Inductor's own, commrt's).

    torchrun --nproc-per-node 2 benchmarks/bench_fx_overlap.py [--layers 16] [--tp]

A Llama-style stack (random weights; RMSNorm, attention, SwiGLU MLP). By default it is
trained data parallel: one function computes the gradients with
``torch.func.grad_and_value``, all-reduces every gradient with functional collectives
and applies SGD, so the gradient all-reduces sit in the compiled graph; the eager
baseline is DDP with its default buckets. With ``--tp`` the ranks form one
tensor-parallel group instead (Megatron layout: column-parallel qkv and gate/up,
row-parallel o and down): the all-reduces are the forward's after every row-parallel
linear and the backward's of every column-parallel input gradient; the eager baseline
is the same step uncompiled. (A run with both kinds needs 4 GPUs.) Reports the median
step time and the hidden fraction of collective time measured from a ``torch.profiler``
GPU trace: collective time (kernels and copies off the compute stream, and kernels
named as collectives) that overlaps compute kernels, over all collective time.
``--copy-engine`` adds a row with the all-reduces on commrt's copy-engine group;
``--rows`` adds commrt.fx rows with any mix of the pass's options (and Inductor's
peak-memory reordering off, or every matmul leaving SMs free), e.g.
``--rows 'ce,budget=4096,no_reorder;ctas=8,budget=4096'``.

``--grid`` runs small graphs instead (``GRID_DP``, ``GRID_TP``): gradient synchronisation
(16-256 gradients of 256 KiB-8 MiB, fp32 and bf16, no, light or heavy independent
compute) and row-parallel MLPs of one and two micro-batches; columns compiled, Inductor's
overlap, one bucket by hand, commrt.fx and the floor without collectives, each checked
against the eager step before it is timed; ``fx_grid_<generation>_ws<N>.{json,md}`` is
rewritten after every cell.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import statistics
import sys
import time
from unittest import mock

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F

FLOOR = "compiled, no all-reduce (floor)"
COMMRT = "compiled + commrt.fx"


def init_params(layers: int, hidden: int, inter: int, device, seed: int = 0,
                tp: int = 1) -> dict:
    """This rank's parameters: its 1/tp shard of qkv, gate/up (rows) and o, down (columns)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g, device=device) * 0.02).to(torch.bfloat16)

    p = {}
    for i in range(layers):
        p[f"{i}.ln1"] = torch.ones(hidden, device=device, dtype=torch.bfloat16)
        p[f"{i}.ln2"] = torch.ones(hidden, device=device, dtype=torch.bfloat16)
        p[f"{i}.qkv"] = w(3 * hidden // tp, hidden)
        p[f"{i}.o"] = w(hidden, hidden // tp)
        p[f"{i}.gate_up"] = w(2 * inter // tp, hidden)
        p[f"{i}.down"] = w(hidden, inter // tp)
    return p


class _ToTP(torch.autograd.Function):
    """Into a column-parallel linear: identity forward, all-reduce of the gradient."""

    @staticmethod
    def forward(x):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        with torch.no_grad():  # no double backward; keeps the op's own autograd out of grad()
            return fc.all_reduce(g, "sum", dist.group.WORLD)


class _FromTP(torch.autograd.Function):
    """Out of a row-parallel linear: all-reduce forward, identity gradient."""

    @staticmethod
    def forward(x):
        return fc.all_reduce(x, "sum", dist.group.WORLD)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g


def loss_fn(p: dict, x: torch.Tensor, layers: int, heads: int, tp: int = 1) -> torch.Tensor:
    b, s, h = x.shape
    hd, local = h // heads, heads // tp
    into, out = (_ToTP.apply, _FromTP.apply) if tp > 1 else (lambda t: t, lambda t: t)
    for i in range(layers):
        y = F.rms_norm(x, (h,), p[f"{i}.ln1"], 1e-5)
        q, k, v = F.linear(into(y), p[f"{i}.qkv"]).view(b, s, 3, local, hd).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + out(F.linear(a.transpose(1, 2).reshape(b, s, local * hd), p[f"{i}.o"]))
        y = F.rms_norm(x, (h,), p[f"{i}.ln2"], 1e-5)
        gate, up = F.linear(into(y), p[f"{i}.gate_up"]).chunk(2, -1)
        x = x + out(F.linear(F.silu(gate) * up, p[f"{i}.down"]))
    return x.float().pow(2).mean()


def make_step(layers: int, heads: int, world: int, tp: bool = False, lr: float = 1e-3,
              reduce: bool = True):
    """The data-parallel (or ``tp``) training step; ``reduce=False``: DP without the
    gradient all-reduces (the floor a perfect overlap could reach)."""
    grad_and_value = torch.func.grad_and_value(loss_fn)

    def step(p: dict, x: torch.Tensor):
        grads, loss = grad_and_value(p, x, layers, heads, world if tp else 1)
        new = {}
        for k in p:  # forward order; backward makes the last layer's gradients first
            g = grads[k] if tp or not reduce else \
                fc.all_reduce(grads[k], "sum", dist.group.WORLD) / world
            new[k] = p[k] - lr * g
        return new, loss
    return step


class Block(torch.nn.Module):
    """The same layer as ``loss_fn`` for the eager DDP baseline."""

    def __init__(self, p, i, heads):
        super().__init__()
        self.heads = heads
        for k in ("ln1", "ln2", "qkv", "o", "gate_up", "down"):
            self.register_parameter(k, torch.nn.Parameter(p[f"{i}.{k}"].clone()))

    def forward(self, x):
        b, s, h = x.shape
        y = F.rms_norm(x, (h,), self.ln1, 1e-5)
        q, k, v = F.linear(y, self.qkv).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, s, h), self.o)
        y = F.rms_norm(x, (h,), self.ln2, 1e-5)
        gate, up = F.linear(y, self.gate_up).chunk(2, -1)
        return x + F.linear(F.silu(gate) * up, self.down)


def trace_stats(prof) -> dict:
    """From a GPU trace: the hidden fraction (collective time overlapping compute kernels,
    over collective time), the collective ms (kernels and copies, summed), and the
    compute-busy ms (union of compute kernels: how far contention and stalls stretch the
    compute)."""
    gpu = [e for e in prof.events()
           if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]

    def named_comm(e):
        return "nccl" in e.name.lower() or "all_reduce" in e.name.lower()
    # Collective work is everything off the compute stream (NCCL's kernels; the
    # copy-engine group's copies, sums and barriers), plus kernels named as collectives.
    busy: dict = collections.Counter()
    for e in gpu:
        if not named_comm(e):
            busy[getattr(e, "device_resource_id", None)] += e.time_range.elapsed_us()
    main = max(busy, key=busy.get) if busy else None
    comm, compute = [], []
    for e in gpu:
        span = (e.time_range.start, e.time_range.end)
        off_main = main is not None and getattr(e, "device_resource_id", None) != main
        (comm if named_comm(e) or off_main else compute).append(span)
    compute.sort()
    merged = []
    for s, t in compute:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    total = sum(t - s for s, t in comm)
    hidden = 0.0
    for s, t in comm:
        for ms, mt in merged:
            if mt <= s:
                continue
            if ms >= t:
                break
            hidden += min(t, mt) - max(s, ms)
    return {"hidden_fraction": hidden / total if total else 0.0, "comm_ms": total / 1e3,
            "compute_busy_ms": sum(t - s for s, t in merged) / 1e3}


def _slowest_median_ms(fn, iters: int) -> float:
    """Median ms of ``fn`` (after warm-up, a barrier before each), the slower rank's."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iters):
        dist.barrier()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    t = torch.tensor([statistics.median(samples)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def timed(fn, iters: int = 10, trace: str = ""):
    ms = _slowest_median_ms(fn, iters)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    return ms, trace_stats(prof)


def _with_carveout(sms: int, fn, *args):
    """``fn(*args)`` with cuBLASLt matmuls leaving ``sms`` SMs free (then restored)."""
    carveout, backend = torch._C._get_sm_carveout_experimental(), \
        torch._C._get_blas_preferred_backend()
    torch._C._set_sm_carveout_experimental(sms)
    torch._C._set_blas_preferred_backend(torch._C._BlasBackend.Cublaslt)
    try:
        return fn(*args)
    finally:
        torch._C._set_blas_preferred_backend(backend)
        torch._C._set_sm_carveout_experimental(carveout)


class _NeverDone:
    """A cost model whose collectives never end before the compute does: ``defer_stalls``
    then runs every other runnable node before a wait (each wait as late as its users
    allow)."""

    def __init__(self, model):
        self._model = model

    def comm_us(self, *args, **kwargs) -> float:
        return 1e12

    def __getattr__(self, name):
        return getattr(self._model, name)


def _defer(opts: dict):
    """The waits' deferral for a row: as the pass does it, as late as their users allow
    (``late``), or none (``no_defer``: each wait where ``place`` put it)."""
    if opts.get("no_defer"):
        return mock.patch("commrt.fx.overlap.defer_stalls",
                          lambda graph, colls, model: (list(graph.nodes), 0))
    if opts.get("late"):
        from commrt.fx import stalls

        return mock.patch("commrt.fx.overlap.defer_stalls",
                          lambda graph, colls, model: stalls.defer_stalls(graph, colls,
                                                                          _NeverDone(model)))
    return contextlib.nullcontext()


def _install_options(opts: dict) -> dict:
    """``commrt.fx.installed``'s keywords for a row's options."""
    limit = {"comm_ctas": opts["ctas"]} if "ctas" in opts else {}
    if "cap" in opts:
        limit["bucket_cap"] = opts["cap"]
    if "budget" in opts:
        limit["memory_budget"] = opts["budget"]
    if "ce" in opts or "nccl" in opts:  # else COMMRT_FX_COPY_ENGINE (off by default)
        limit["copy_engine"] = "ce" in opts
    return limit


def _row(spec: str) -> dict:
    """The options of one ``--rows`` entry (sizes in MiB)."""
    opts = {"commrt": True}
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        key, _, val = item.partition("=")
        if key in ("ce", "nccl", "gather", "no_hoist", "no_reorder", "late",
                   "no_defer") and not val:
            opts[key] = True
        elif key in ("budget", "cap", "ctas", "carveout") and val.isdigit():
            opts[key] = int(val) << 20 if key in ("budget", "cap") else int(val)
        else:
            raise SystemExit(f"--rows: unknown entry {item!r} in {spec!r}")
    return opts



# --grid: (gradients, bytes each, dtype, compute) sampled so that every level of every
# factor appears at least three times in 12 cells (all 54 would take ~20 minutes to compile);
# at most 512 MiB of gradients a cell. Then tensor-parallel cells of 1 and 2 micro-batches.
GRID_DP = [(16, 256 << 10, "fp32", "none"), (16, 1 << 20, "bf16", "light"),
           (16, 8 << 20, "fp32", "heavy"), (16, 8 << 20, "bf16", "light"),
           (64, 256 << 10, "bf16", "heavy"), (64, 1 << 20, "fp32", "none"),
           (64, 1 << 20, "fp32", "light"), (64, 8 << 20, "bf16", "none"),
           (64, 256 << 10, "fp32", "heavy"), (256, 256 << 10, "fp32", "light"),
           (256, 1 << 20, "bf16", "heavy"), (256, 256 << 10, "bf16", "none")]
GRID_TP = [1, 2]  # micro-batches a layer
COMPUTE = {"none": 0.0, "light": 0.5, "heavy": 3.0}  # compute over the collectives' time
GRID_COLUMNS = ("compiled", "Inductor overlap", "one bucket (by hand)", "commrt.fx", "floor")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_MM = 4096  # the independent compute: tanh(y @ w), y and w 4096 x 4096 bf16


def grad_steps(n: int, k: int, world: int, lr: float = 1e-3) -> dict:
    """A gradient synchronisation as a user writes it: ``k`` matmuls that need no gradient,
    then each gradient all-reduced and applied; by hand, all of them in one all-reduce."""
    group = dist.group.WORLD

    def compute(x, wc):
        for _ in range(k):
            x = torch.tanh(x @ wc)
        return x

    def plain(ps, gs, x, wc):
        y = compute(x, wc)
        synced = [fc.all_reduce(g, "sum", group) / world for g in gs]
        return [p - lr * g for p, g in zip(ps, synced, strict=True)], y

    def by_hand(ps, gs, x, wc):
        y = compute(x, wc)
        flat = fc.all_reduce(torch.cat([g.reshape(-1) for g in gs]), "sum", group) / world
        sizes = [g.numel() for g in gs]
        return [p - lr * r.view_as(p) for p, r in zip(ps, flat.split(sizes), strict=True)], y

    def floor(ps, gs, x, wc):
        y = compute(x, wc)
        return [p - lr * g for p, g in zip(ps, gs, strict=True)], y

    return {"compiled": plain, "Inductor overlap": plain, "one bucket (by hand)": by_hand,
            "commrt.fx": plain, "floor": floor}


def tp_steps(micro: int, layers: int) -> dict:
    """Row-parallel MLPs: per layer and micro-batch ``x + all_reduce(gelu(x @ w1) @ w2)``;
    by hand, the micro-batches' partial sums of a layer in one all-reduce."""
    group = dist.group.WORLD

    def mlp(x, w1, w2):
        return F.gelu(x @ w1) @ w2

    def plain(xs, w1s, w2s, reduce=True):
        xs = list(xs)
        for w1, w2 in zip(w1s, w2s, strict=True):
            for i in range(micro):
                y = mlp(xs[i], w1, w2)
                xs[i] = xs[i] + (fc.all_reduce(y, "sum", group) if reduce else y)
        return xs

    def by_hand(xs, w1s, w2s):
        xs = list(xs)
        for w1, w2 in zip(w1s, w2s, strict=True):
            ys = fc.all_reduce(torch.cat([mlp(x, w1, w2) for x in xs]), "sum", group)
            xs = [x + y for x, y in zip(xs, ys.chunk(micro), strict=True)]
        return xs

    steps = {"compiled": plain, "Inductor overlap": plain, "commrt.fx": plain,
             "floor": functools.partial(plain, reduce=False)}
    if micro > 1:
        steps["one bucket (by hand)"] = by_hand
    return steps


def _grid_cells(args, model) -> list[dict]:
    """Every cell's inputs' recipe, its compute and its collectives' time by the tables."""
    mm_us = 2 * _MM ** 3 / model.flops * 1e6
    cells = []
    for n, size, dt, level in GRID_DP:
        comm_us = n * model.comm_us("all_reduce", size, _DTYPES[dt], "0")
        k = min(64, round(COMPUTE[level] * comm_us / mm_us))
        if COMPUTE[level] and not k:
            k = 1
        cells.append({"kind": "dp", "gradients": n, "bytes": size, "dtype": dt,
                      "compute": level, "matmuls": k, "comm_us_tables": comm_us,
                      "compute_us_model": k * mm_us})
    for micro in GRID_TP:
        tokens = args.grid_tp_tokens // micro
        comm_us = micro * args.grid_tp_layers * model.comm_us(
            "all_reduce", tokens * args.grid_tp_hidden * 2, torch.bfloat16, "0")
        flops = 4 * args.grid_tp_tokens * args.grid_tp_hidden * args.grid_tp_inter
        cells.append({"kind": "tp", "micro_batches": micro, "layers": args.grid_tp_layers,
                      "tokens": args.grid_tp_tokens, "dtype": "bf16", "comm_us_tables": comm_us,
                      "compute_us_model": args.grid_tp_layers * flops / model.flops * 1e6})
    for c in cells:  # room to hide every collective: compute at least twice their time
        c["room"] = c["compute_us_model"] >= 2 * c["comm_us_tables"]
    return cells


def _grid_inputs(cell: dict, args, dev, rank: int, world: int):
    """(steps, inputs): seeded by rank where ranks differ (gradients; TP weight shards)."""
    g = torch.Generator(device=dev).manual_seed(1 + rank)

    def rnd(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, generator=g, device=dev) * scale).to(dtype)

    if cell["kind"] == "dp":
        dt, numel = _DTYPES[cell["dtype"]], cell["bytes"] // _DTYPES[cell["dtype"]].itemsize
        ps = [torch.full((numel,), 0.5, device=dev, dtype=dt) for _ in range(cell["gradients"])]
        gs = [rnd(numel, dtype=dt) for _ in range(cell["gradients"])]
        x, wc = rnd(_MM, _MM), rnd(_MM, _MM, scale=_MM ** -0.5)
        return grad_steps(cell["gradients"], cell["matmuls"], world), (ps, gs, x, wc)
    micro, h, f = cell["micro_batches"], args.grid_tp_hidden, args.grid_tp_inter // world
    xs = [torch.ones(args.grid_tp_tokens // micro, h, device=dev, dtype=torch.bfloat16)
          for _ in range(micro)]
    w1s = [rnd(h, f, scale=h ** -0.5) for _ in range(cell["layers"])]
    w2s = [rnd(f, h, scale=(f * world) ** -0.5) for _ in range(cell["layers"])]
    return tp_steps(micro, cell["layers"]), (xs, w1s, w2s)


_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}  # relative to the largest value


def _close(got, ref) -> float:
    """Largest difference over the leaves, relative to the reference's largest value, over
    the tolerance of the leaf's dtype (1 or less: close enough)."""
    worst = 0.0
    for a, b in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(ref),
                    strict=True):
        scale = float(b.float().abs().max()) or 1.0
        diff = float((a.float() - b.float()).abs().max()) / scale
        worst = max(worst, diff / _TOLERANCE.get(b.dtype, 2e-2))
    return worst


def _grid_cell(cell: dict, args, dev, rank: int, world: int) -> dict:
    """Compile every column, check it against the eager step, time it."""
    import torch._inductor.config as ic

    import commrt.fx

    steps, inputs = _grid_inputs(cell, args, dev, rank, world)
    ref = steps["compiled"](*inputs)
    out = {"ms": {}, "diff_over_tolerance": {}, "reports": [], "row_reports": {}}
    rows = {name: {"commrt": True} if name == "commrt.fx" else {} for name in steps}
    for spec in (r for r in args.grid_rows.split(";") if r.strip()):
        rows[f"commrt.fx ({spec})"] = opts = _row(spec)
        if set(opts) - {"commrt", "cap", "budget", "late", "no_defer"}:
            raise SystemExit(f"--grid-rows: {spec!r}: the grid takes cap=, budget=, late "
                             "and no_defer only")
    for name, opts in rows.items():
        fn = steps.get(name, steps["commrt.fx"])
        torch._dynamo.reset()
        commrt.fx.last_reports.clear()
        # a cache hit skips the report
        patches = {"fx_graph_cache": not opts.get("commrt")}
        if name == "Inductor overlap":
            patches["aten_distributed_optimizations.enable_overlap_scheduling"] = True
        passes = commrt.fx.installed(**_install_options(opts)) if opts.get("commrt") else \
            contextlib.nullcontext()
        with ic.patch(patches), _defer(opts), passes:
            compiled = torch.compile(fn, fullgraph=True)
            got = compiled(*inputs)
            if name != "floor":
                diff = out["diff_over_tolerance"][name] = _close(got, ref)
                assert diff <= 1.0, (cell, name, "differs from the eager step", diff)
            out["ms"][name] = _slowest_median_ms(lambda c=compiled: c(*inputs), args.grid_iters)
        if opts.get("commrt"):
            reports = [{k: r.__dict__.get(k) for k in (
                "collectives_before", "collectives_after", "buckets", "plan", "plan_us",
                "limited", "exposed_us_after", "comm_us", "deferred")}
                for n, r in commrt.fx.last_reports if n == "overlap"]
            if name == "commrt.fx":
                out["reports"] = reports
            else:
                out["row_reports"][name] = reports
    others = [v for k, v in out["ms"].items() if k in GRID_COLUMNS
              and k not in ("commrt.fx", "floor")]
    out["commrt_over_best_other"] = out["ms"]["commrt.fx"] / min(others)
    out["commrt_over_floor"] = out["ms"]["commrt.fx"] / out["ms"]["floor"]
    return out


def _grid_md(m: dict, cells: list[dict]) -> str:
    extra = list(dict.fromkeys(k for c in cells for k in c.get("ms", {})
                               if k not in GRID_COLUMNS))  # --grid-rows
    columns = (*GRID_COLUMNS, *extra)
    head = ["cell", "room", *columns, "commrt / best other", "commrt / floor", "plan"]
    lines = [f"# FX grid: {m['device']} x {m['world_size']}, torch {m['torch']}, NCCL "
             f"{m['nccl']}, {m['date']}, commit {m['commit']}", "", f"`{m['command']}`", "",
             "Median ms a step; room: compute at least twice the collectives' time by the "
             "tables.", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        if "ms" not in c:
            continue
        name = (f"{c['gradients']} x {c['bytes'] >> 10} KiB {c['dtype']}, {c['compute']}"
                if c["kind"] == "dp" else f"TP, {c['micro_batches']} micro-batches")
        ms = [f"{c['ms'][k]:.3f}" if k in c["ms"] else "n/a" for k in columns]
        plan = ",".join(r["plan"] or "-" for r in c["reports"])
        lines.append(f"| {name} | {'yes' if c['room'] else 'no'} | " + " | ".join(ms) +
                     f" | {c['commrt_over_best_other']:.3f} | {c['commrt_over_floor']:.3f} "
                     f"| {plan} |")
    return "\n".join(lines) + "\n"


def run_grid(args, comm, dev) -> None:
    """``--grid``: every cell, its result written after each (see ``GRID_DP``)."""
    from commrt import bench
    from commrt.fx.cost import CostModel

    world, rank = dist.get_world_size(), comm.rank
    cells = _grid_cells(args, CostModel(comm.profile))
    if args.grid_cells:
        cells = [cells[int(i)] for i in args.grid_cells.split(",")]
    m = bench.meta(comm, f"torchrun --nproc-per-node {world} " + " ".join(sys.argv))
    base = os.path.join(args.out_dir, f"fx_grid_{comm.profile.generation}_ws{world}")
    os.makedirs(args.out_dir, exist_ok=True)
    for i, cell in enumerate(cells):
        t0 = time.perf_counter()
        cell.update(_grid_cell(cell, args, dev, rank, world))
        if rank == 0:
            print(f"[{i + 1}/{len(cells)}] {time.perf_counter() - t0:5.1f} s  " +
                  " ".join(f"{k} {v:.3f}" for k, v in cell["ms"].items()) +
                  f"  commrt/best other {cell['commrt_over_best_other']:.3f}", flush=True)
            with open(base + ".json", "w") as f:
                json.dump({"meta": m, "cells": cells}, f, indent=1, default=str)
            with open(base + ".md", "w") as f:
                f.write(_grid_md(m, cells))
        torch.cuda.empty_cache()
    if rank == 0:
        print(f"wrote {base}.json and .md", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--tp", action="store_true",
                    help="the ranks form one tensor-parallel group (default: data parallel)")
    ap.add_argument("--comm-ctas", default="",
                    help="extra rows: commrt.fx with the graphs' NCCL collectives on a copy "
                         "of the group limited to each of these CTA counts, e.g. 4,8,16")
    ap.add_argument("--copy-engine", action="store_true",
                    help="extra row: commrt.fx with the all-reduces on a copy-engine group")
    ap.add_argument("--bucket-caps", default="",
                    help="extra rows: commrt.fx with these largest bucket sizes in MiB, e.g. 256")
    ap.add_argument("--no-hoist", action="store_true",
                    help="extra row: commrt.fx leaving each collective's producer in place "
                         "(no hoisting)")
    ap.add_argument("--memory-budgets", default="",
                    help="extra rows: commrt.fx allowed to add this many MiB to the graph's "
                         "peak (default budget: 5%% of it), e.g. 4096")
    ap.add_argument("--rows", default="",
                    help="extra commrt.fx rows, ';'-separated, each a ','-separated mix of "
                         "ce, nccl (no copy engine), gather (ce as all-gathers, also at "
                         "world size 2), no_hoist, late (every wait as late as its users "
                         "allow), no_defer (no wait deferred), "
                         "no_reorder, budget=MiB, cap=MiB, ctas=N, carveout=N (every "
                         "matmul of the step through cuBLASLt leaving N SMs free), e.g. "
                         "'ce,budget=4096,no_reorder;ce,budget=4096,no_reorder,cap=128'")
    ap.add_argument("--trace-dir", default="",
                    help="write rank 0's GPU trace of one step of each commrt.fx row here")
    ap.add_argument("--out-dir", default="benchmarks/results")
    ap.add_argument("--grid", action="store_true",
                    help="instead of the training step: the grid of gradient-synchronisation "
                         "and tensor-parallel graphs (GRID_DP, GRID_TP), every column")
    ap.add_argument("--grid-cells", default="", help="only these cells of the grid, e.g. 0,5")
    ap.add_argument("--grid-rows", default="",
                    help="extra commrt.fx columns in the grid, ';'-separated --rows entries "
                         "(cap=MiB, budget=MiB, late: every wait as late as its users allow, "
                         "no_defer: each wait where the placement put it), e.g. "
                         "'late;cap=256;late,cap=256'")
    ap.add_argument("--grid-iters", type=int, default=15)
    ap.add_argument("--grid-tp-layers", type=int, default=4)
    ap.add_argument("--grid-tp-tokens", type=int, default=4096)
    ap.add_argument("--grid-tp-hidden", type=int, default=4096)
    ap.add_argument("--grid-tp-inter", type=int, default=16384)
    args = ap.parse_args()
    import torch._inductor.config as ic

    import commrt.fx
    from commrt import bench

    comm, dev = bench.init_torchrun()
    if args.grid:
        run_grid(args, comm, dev)
        dist.barrier()
        dist.destroy_process_group()
        return
    world, local = dist.get_world_size(), dev.index
    tp = world if args.tp else 1
    # TP: a shard of the weights per rank, the same tokens; DP: the same weights, a batch each
    params = init_params(args.layers, args.hidden, args.inter, dev,
                         seed=comm.rank if args.tp else 0, tp=tp)
    x = torch.randn(args.batch, args.seq, args.hidden, device=dev,
                    generator=torch.Generator(device=dev).manual_seed(
                        1 if args.tp else 1 + comm.rank)).to(torch.bfloat16)
    rows = {}
    step = make_step(args.layers, args.heads, world, tp=args.tp)
    if args.tp:
        eager_loss = float(step(params, x)[1])
        rows["eager"] = timed(lambda: step(params, x))
    else:
        model = torch.nn.Sequential(*[Block(params, i, args.heads)
                                      for i in range(args.layers)])
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

        def ddp_step():
            opt.zero_grad(set_to_none=True)
            ddp(x).float().pow(2).mean().backward()
            opt.step()
        rows["eager DDP"] = timed(ddp_step)

    variants = {"compiled": {}, "compiled + Inductor overlap": {"inductor": True},
                COMMRT: {"commrt": True}}
    if args.copy_engine:
        variants[f"{COMMRT} (copy engine)"] = {"commrt": True, "ce": True}
    if args.no_hoist:
        variants[f"{COMMRT} (producers in place)"] = {"commrt": True, "no_hoist": True}
    for mib in (int(c) for c in args.memory_budgets.split(",") if c):
        variants[f"{COMMRT} (memory budget {mib} MiB)"] = {"commrt": True, "budget": mib << 20}
    for n in (int(c) for c in args.comm_ctas.split(",") if c):
        variants[f"{COMMRT} (NCCL <= {n} CTAs)"] = {"commrt": True, "ctas": n}
    for mib in (int(c) for c in args.bucket_caps.split(",") if c):
        variants[f"{COMMRT} (buckets <= {mib} MiB)"] = {"commrt": True, "cap": mib << 20}
    for spec in (r for r in args.rows.split(";") if r.strip()):
        variants[f"{COMMRT} ({spec})"] = _row(spec)
    if not args.tp:  # not a contender: how far from perfect overlap each one is
        variants[FLOOR] = {"floor": True}
    reports, ref_new, diffs = {}, None, {}
    for name, opts in variants.items():
        torch._dynamo.reset()
        commrt.fx.last_reports.clear()
        patches = {"fx_graph_cache": False}
        if opts.get("no_reorder"):
            patches["reorder_for_peak_memory"] = False
        if opts.get("inductor"):
            patches["aten_distributed_optimizations.enable_overlap_scheduling"] = True
        limit = _install_options(opts)
        no_hoist = mock.patch("commrt.fx.hoist.hoist_producers", lambda *a: (0, 0)) \
            if opts.get("no_hoist") else contextlib.nullcontext()
        if opts.get("gather"):  # the copy-engine path's all-gathers also at world size 2
            opts["ce"] = limit["copy_engine"] = True
        gather = mock.patch("commrt.fx.overlap.EXCHANGE_WORLDS", ()) \
            if opts.get("gather") else contextlib.nullcontext()
        passes = commrt.fx.installed(**limit) if opts.get("commrt") else \
            contextlib.nullcontext()
        with ic.patch(patches), no_hoist, gather, _defer(opts), passes:
            fn = torch.compile(make_step(args.layers, args.heads, world, reduce=False)
                               if opts.get("floor") else step, fullgraph=True)
            if args.tp:  # the same step as eager's
                loss = float(fn(params, x)[1])
                assert abs(loss - eager_loss) <= 2e-2 * abs(eager_loss), (name, loss, eager_loss)
            elif not opts.get("floor"):  # the same updated parameters as plain compiled
                new = fn(params, x)[0]
                ref_new = ref_new or new
                worst = max(float((new[k].float() - ref_new[k].float()).abs().max())
                            for k in new)
                assert worst <= 1e-3, (name, "parameters differ from plain compiled", worst)
                diffs[name] = worst
            trace = ""
            if args.trace_dir and comm.rank == 0 and name.startswith(COMMRT):
                os.makedirs(args.trace_dir, exist_ok=True)
                trace = os.path.join(args.trace_dir, "".join(
                    c if c.isalnum() else "_" for c in name) + ".json")
            run = (lambda fn=fn: fn(params, x)) if "carveout" not in opts else \
                functools.partial(_with_carveout, opts["carveout"], fn, params, x)
            rows[name] = timed(run, trace=trace)
        reports[name] = [(n, r.__dict__) for n, r in commrt.fx.last_reports]
    best_other = min(v[0] for k, v in rows.items() if not k.startswith(COMMRT) and k != FLOOR)
    ratios = {k: v[0] / best_other for k, v in rows.items() if k.startswith(COMMRT)}
    if comm.rank == 0:
        for k, (ms, st) in rows.items():
            print(f"{k:<30} {ms:8.2f} ms/step  hidden {st['hidden_fraction']:.2f}  "
                  f"comm {st['comm_ms']:.2f} ms  compute busy {st['compute_busy_ms']:.2f} ms",
                  flush=True)
        print("largest difference of the updated parameters from plain compiled: " +
              ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()), flush=True)
        ratio = ratios[COMMRT]
        for k, r in ratios.items():
            print(f"{k} / best other: {r:.3f}", flush=True)
        os.makedirs(args.out_dir, exist_ok=True)
        m = bench.meta(comm, f"torchrun --nproc-per-node {world} " + " ".join(sys.argv))
        m.update(vars(args))
        path = os.path.join(args.out_dir, f"fx_overlap_{comm.profile.generation}_ws{world}"
                                          f"{'_tp' if args.tp else ''}.json")
        with open(path, "w") as f:
            json.dump({"meta": m, "results": {k: {"ms": v[0], **v[1]}
                                              for k, v in rows.items()},
                       "commrt_over_best_other": ratio, "ratios": ratios,
                       "max_abs_diff_vs_compiled": diffs,
                       "reports": reports}, f, indent=1,
                      default=str)
        print(f"wrote {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
