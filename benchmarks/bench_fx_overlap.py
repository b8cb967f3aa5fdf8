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


def timed(fn, iters: int = 10, trace: str = ""):
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
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    t = torch.tensor([statistics.median(samples)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item()), trace_stats(prof)


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


def _row(spec: str) -> dict:
    """The options of one ``--rows`` entry (sizes in MiB)."""
    opts = {"commrt": True}
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        key, _, val = item.partition("=")
        if key in ("ce", "nccl", "gather", "no_hoist", "no_reorder") and not val:
            opts[key] = True
        elif key in ("budget", "cap", "ctas", "carveout") and val.isdigit():
            opts[key] = int(val) << 20 if key in ("budget", "cap") else int(val)
        else:
            raise SystemExit(f"--rows: unknown entry {item!r} in {spec!r}")
    return opts


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
                         "(the pass before session 14)")
    ap.add_argument("--memory-budgets", default="",
                    help="extra rows: commrt.fx allowed to add this many MiB to the graph's "
                         "peak (default budget: 5%% of it), e.g. 4096")
    ap.add_argument("--rows", default="",
                    help="extra commrt.fx rows, ';'-separated, each a ','-separated mix of "
                         "ce, nccl (no copy engine), gather (ce as all-gathers, also at "
                         "world size 2), no_hoist, "
                         "no_reorder, budget=MiB, cap=MiB, ctas=N, carveout=N (every "
                         "matmul of the step through cuBLASLt leaving N SMs free), e.g. "
                         "'ce,budget=4096,no_reorder;ce,budget=4096,no_reorder,cap=128'")
    ap.add_argument("--trace-dir", default="",
                    help="write rank 0's GPU trace of one step of each commrt.fx row here")
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    import torch._inductor.config as ic

    import commrt.fx
    from commrt import bench

    comm, dev = bench.init_torchrun()
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
        limit = {"comm_ctas": opts["ctas"]} if "ctas" in opts else {}
        if "cap" in opts:
            limit["bucket_cap"] = opts["cap"]
        if "budget" in opts:
            limit["memory_budget"] = opts["budget"]
        if "ce" in opts or "nccl" in opts:  # else COMMRT_FX_COPY_ENGINE (auto)
            limit["copy_engine"] = "ce" in opts
        no_hoist = mock.patch("commrt.fx.hoist.hoist_producers", lambda *a: (0, 0)) \
            if opts.get("no_hoist") else contextlib.nullcontext()
        if opts.get("gather"):  # the copy-engine path's all-gathers also at world size 2
            opts["ce"] = limit["copy_engine"] = True
        gather = mock.patch("commrt.fx.overlap.EXCHANGE_WORLDS", ()) \
            if opts.get("gather") else contextlib.nullcontext()
        passes = commrt.fx.installed(**limit) if opts.get("commrt") else \
            contextlib.nullcontext()
        with ic.patch(patches), no_hoist, gather, passes:
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
