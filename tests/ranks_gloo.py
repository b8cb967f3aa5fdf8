"""Per-rank bodies of the 2-process gloo tests."""

from __future__ import annotations

from unittest import mock

import torch
import torch.distributed as dist

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64)
SHAPES = ((), (0,), (1,), (7,), (4097,), (3, 5, 7))


def make(seed: int, rank: int, shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 101 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)


def reference(seed: int, world: int, shape, dtype) -> torch.Tensor:
    return sum(make(seed, r, shape, dtype).double() for r in range(world))


def close(got: torch.Tensor, ref: torch.Tensor) -> bool:
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5,
           torch.float64: 1e-12}.get(got.dtype, 0.0)
    return got.shape == ref.shape and torch.allclose(got.double(), ref, rtol=tol, atol=tol)


def semantics(rank, world):
    """Communicator and module-level calls against float64 sums; out=, views, async, plan."""
    import commrt

    comm = commrt.init()
    bad, seed = [], 0
    for dtype in DTYPES:
        for shape in SHAPES:
            seed += 1
            ref = reference(seed, world, shape, dtype)
            x = make(seed, rank, shape, dtype)
            comm.all_reduce(x)
            y = make(seed, rank, shape, dtype)
            commrt.all_reduce(y)
            z = make(seed, rank, shape, dtype)
            out = torch.empty_like(z)
            comm.all_reduce(z, out=out)
            for name, got in (("comm", x), ("module", y), ("out", out)):
                if not close(got, ref):
                    bad.append(f"{name} {dtype} {shape}")
            if not torch.equal(z, make(seed, rank, shape, dtype)):
                bad.append(f"out= modified the input {dtype} {shape}")
    # non-contiguous views: reduce a copy, write back, leave the rest alone
    base = make(99, rank, (6, 8), torch.float32)
    view = base[:, 1::2]
    comm.all_reduce(view)
    ref = reference(99, world, (6, 8), torch.float32)
    if not close(base[:, 1::2], ref[:, 1::2]) or not close(base[:, ::2],
                                                         make(99, rank, (6, 8), torch.float32)
                                                         .double()[:, ::2]):
        bad.append("non-contiguous view")
    t = make(77, rank, (6, 8), torch.float32).t()  # transposed, non-contiguous, async
    work = comm.all_reduce(t, async_op=True)
    work.wait()
    if not close(t, reference(77, world, (6, 8), torch.float32).t()):
        bad.append("async transposed")
    w = commrt.all_reduce(make(5, rank, (4,), torch.float32), async_op=True)
    w.wait()
    plan = comm.plan(make(1, rank, (16,), torch.float32))
    maxplan = comm.plan(make(1, rank, (16,), torch.float32), op=dist.ReduceOp.MAX)
    m = make(3, rank, (9,), torch.float32)
    comm.all_reduce(m, op=dist.ReduceOp.MAX)
    if not torch.equal(m, torch.maximum(make(3, 0, (9,), torch.float32),
                                        make(3, 1, (9,), torch.float32))):
        bad.append("max")
    return {"bad": bad, "plan": (plan.algorithm, plan.reason),
            "maxplan": (maxplan.algorithm, maxplan.reason)}


def compiled(rank, world):
    """torch.compile(fullgraph=True) of code calling the op, the module call and the method."""
    import commrt

    comm = commrt.init()
    group_name = comm.group_name

    def by_op(x):
        return torch.ops.commrt.all_reduce(x * 2, group_name) + 1

    def by_module(x):
        y = x * 2
        commrt.all_reduce(y)
        return y + 1

    def by_method(x):
        y = x * 2
        comm.all_reduce(y)
        return y + 1

    results = {}
    x = make(11, rank, (5, 33), torch.float32)
    ref = by_op(x.clone())
    for name, fn in (("op", by_op), ("module", by_module), ("method", by_method)):
        for backend in ("eager", "aot_eager", "inductor"):
            got = torch.compile(fn, fullgraph=True, backend=backend)(x.clone())
            results[f"{name}/{backend}"] = bool(torch.allclose(got, ref))
            torch._dynamo.reset()
    results["value"] = bool(torch.allclose(ref, reference(11, world, (5, 33), torch.float32)
                                           .float() * 2 + 1))
    return results


def check_mode(rank, world):
    """COMMRT_CHECK=1: rank 1 passes another shape; every rank raises instead of hanging."""
    import commrt

    comm = commrt.init()
    shape = (4, 8) if rank == 0 else (4, 9)
    try:
        comm.all_reduce(torch.ones(shape))
    except commrt.MismatchError as exc:
        first = str(exc)
    else:
        first = ""
    try:
        comm.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.float64))
    except commrt.MismatchError as exc:
        second = str(exc)
    else:
        second = ""
    x, res = torch.ones(2, 8), torch.ones(2, 8)
    try:  # the fused op needs the residual and weight replicated, as TP has them
        comm.all_reduce_residual_rmsnorm(x, res, torch.full((8,), 1.0 + rank), 1e-5)
    except commrt.MismatchError as exc:
        third = str(exc)
    else:
        third = ""
    normed, new_res = comm.all_reduce_residual_rmsnorm(x, res, torch.ones(8), 1e-5)
    ok = torch.ones(3)
    comm.all_reduce(ok)  # matching calls still work afterwards
    return {"first": first, "second": second, "third": third, "ok": ok.tolist(),
            "fused_ok": new_res.tolist() == [[3.0] * 8] * 2}


def bad_input(rank, world):
    """Wrong device, mismatched out=, no init: clear errors, no hang."""
    import commrt

    comm = commrt.init()
    errors = {}
    for name, call in (
        ("meta", lambda: comm.all_reduce(torch.empty(4, device="meta"))),
        ("out", lambda: comm.all_reduce(torch.ones(4), out=torch.empty(5))),
        ("empty", lambda: comm.empty(4)),
    ):
        try:
            call()
            errors[name] = ""
        except commrt.CommrtError as exc:
            errors[name] = str(exc)
    return errors


def disagree(rank, world):
    """Ranks with different configs agree to use the process group only, with a reason."""
    import warnings

    import commrt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm = commrt.init()
    x = torch.ones(4)
    comm.all_reduce(x)
    return {"blocked": comm.facts.custom_blocked, "sum": x.tolist(),
            "warned": [str(w.message) for w in caught if "commrt" in str(w.message)]}


def fx_fused_numerics(rank, world):
    """A compiled decoder-style block with commrt.fx installed against eager, 2 ranks."""
    import torch._inductor.config as ic
    import torch.nn.functional as F

    import commrt
    import commrt.fx

    commrt.init()
    w = make(40, 0, (64,), torch.float32).to(torch.bfloat16)

    def block(x, r):
        y = x * 2
        dist.all_reduce(y)
        h = r + y
        hf = h.float()
        n = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype) * w
        y2 = n * 3
        commrt.all_reduce(y2)
        h2 = y2 + h
        return F.rms_norm(h2, (64,), w, 1e-5), h2

    x = make(41, rank, (6, 64), torch.float32).to(torch.bfloat16)
    r = make(42, 0, (6, 64), torch.float32).to(torch.bfloat16)
    ref = block(x.clone(), r.clone())
    commrt.fx.last_reports.clear()
    with commrt.fx.installed(), ic.patch(fx_graph_cache=False):
        got = torch.compile(block, fullgraph=True)(x.clone(), r.clone())
    fused = sum(rep.fused for name, rep in commrt.fx.last_reports if name == "fuse_rmsnorm")
    # within bf16 rounding: the fused op multiplies by the weight before its one rounding
    close_ = all(float((a.double() - b.double()).norm() / b.double().norm()) < 1e-2
                 for a, b in zip(got, ref, strict=True))
    return {"fused": fused, "close": close_}


def fx_overlap_numerics(rank, world):
    """Gradient-style all-reduces between matmuls: compiled with commrt's overlap pass
    against compiled without it (bitwise) and eager (tolerance), on 2 gloo ranks."""
    import torch._inductor.config as ic
    import torch.distributed._functional_collectives as fc

    import commrt.fx

    ws = [make(60 + i, 0, (32, 32), torch.float32) for i in range(4)]

    def step(x):
        outs = []
        for wt in ws:
            outs.append(fc.all_reduce(x @ wt, "sum", dist.group.WORLD))
            x = torch.relu(x @ wt.t())
        return x, outs

    x = make(70, rank, (8, 32), torch.float32)
    ref = step(x)
    results = {}
    for name, on in (("plain", False), ("overlap", True)):
        commrt.fx.last_reports.clear()
        torch._dynamo.reset()
        with commrt.fx.installed(fuse_rmsnorm=False, overlap=on), ic.patch(fx_graph_cache=False):
            results[name] = torch.compile(step, fullgraph=True)(x)
        if on:
            reps = [r for n, r in commrt.fx.last_reports if n == "overlap"]
    flat = torch.utils._pytree.tree_leaves
    return {"bitwise": all(torch.equal(a, b) for a, b in zip(flat(results["overlap"]),
                                                             flat(results["plain"]),
                                                             strict=True)),
            "close": all(torch.allclose(a, b, rtol=1e-5, atol=1e-5)
                         for a, b in zip(flat(results["overlap"]), flat(ref), strict=True)),
            "buckets": sum(r.buckets for r in reps), "before": sum(r.collectives_before
                                                                  for r in reps)}


def dp_training_step(rank, world):
    """``bench_fx_overlap.py``'s data-parallel step (2 layers, small): compiled with
    commrt's passes (gradient matmuls moved up, buckets) against compiled without
    (bitwise) and the same step eager (tolerance)."""
    import os
    import sys

    import torch._inductor.config as ic

    import commrt.fx

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_fx_overlap as b

    layers, heads = 2, 4
    p = b.init_params(layers, 64, 128, torch.device("cpu"))
    x = make(80, rank, (2, 64, 64), torch.float32).to(torch.bfloat16)
    step = b.make_step(layers, heads, world)
    results = {}
    for name, on in (("plain", False), ("commrt", True)):
        torch._dynamo.reset()
        commrt.fx.last_reports.clear()
        with commrt.fx.installed(overlap=on), ic.patch(fx_graph_cache=False):
            results[name] = torch.compile(step, fullgraph=True)(p, x)
        if on:
            reps = [r for n, r in commrt.fx.last_reports if n == "overlap"]
    eager = step(p, x)
    new, plain = results["commrt"][0], results["plain"][0]
    return {"bitwise": all(torch.equal(new[k], plain[k]) for k in p),
            "close": all(torch.allclose(new[k].float(), eager[0][k].float(), atol=1e-2)
                         for k in p),
            "hoisted": sum(r.hoisted for r in reps),
            "buckets": sum(r.buckets for r in reps)}


def tp_training_step(rank, world):
    """``bench_fx_overlap.py --tp``'s step: its TP gradients against the unsharded model's,
    and the step compiled with commrt's passes against eager."""
    import os
    import sys

    import torch._inductor.config as ic

    import commrt.fx

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_fx_overlap as b

    layers, h, inter, heads, hd = 2, 32, 64, 4, 8
    p = {k: v.float() for k, v in b.init_params(layers, h, inter, "cpu", seed=rank,
                                                 tp=world).items()}
    x = make(80, 0, (2, 8, h), torch.float32)  # the same tokens on every rank
    shards = [None] * world
    dist.all_gather_object(shards, p)
    full = {}
    for i in range(layers):  # the unsharded weights, in the layout loss_fn(tp=1) reads
        full[f"{i}.ln1"], full[f"{i}.ln2"] = p[f"{i}.ln1"], p[f"{i}.ln2"]
        full[f"{i}.qkv"] = torch.cat([s[f"{i}.qkv"].view(3, heads // world, hd, h)
                                      for s in shards], 1).reshape(3 * h, h)
        full[f"{i}.o"] = torch.cat([s[f"{i}.o"] for s in shards], 1)
        halves = [s[f"{i}.gate_up"].chunk(2) for s in shards]
        full[f"{i}.gate_up"] = torch.cat([g for g, _ in halves] + [u for _, u in halves])
        full[f"{i}.down"] = torch.cat([s[f"{i}.down"] for s in shards], 1)
    grads = torch.func.grad(b.loss_fn)(p, x, layers, heads, world)
    ref = torch.func.grad(b.loss_fn)(full, x, layers, heads)
    mine = {}
    for i in range(layers):
        mine[f"{i}.ln1"], mine[f"{i}.ln2"] = ref[f"{i}.ln1"], ref[f"{i}.ln2"]
        mine[f"{i}.qkv"] = ref[f"{i}.qkv"].view(3, heads, hd, h).chunk(world, 1)[rank]
        mine[f"{i}.o"] = ref[f"{i}.o"].chunk(world, 1)[rank]
        gate, up = ref[f"{i}.gate_up"].chunk(2)
        mine[f"{i}.gate_up"] = torch.cat([gate.chunk(world)[rank], up.chunk(world)[rank]])
        mine[f"{i}.down"] = ref[f"{i}.down"].chunk(world, 1)[rank]
    step = b.make_step(layers, heads, world, tp=True)
    eager = step(p, x)
    commrt.fx.last_reports.clear()
    torch._dynamo.reset()
    with commrt.fx.installed(), ic.patch(fx_graph_cache=False):
        compiled = torch.compile(step, fullgraph=True)(p, x)
    reps = [r for n, r in commrt.fx.last_reports if n == "overlap"]
    return {"grads": all(torch.allclose(grads[k], mine[k].reshape(grads[k].shape), rtol=1e-4,
                                        atol=1e-6) for k in p),
            "compiled": all(torch.allclose(compiled[0][k], eager[0][k], rtol=1e-5, atol=1e-6)
                            for k in p) and torch.allclose(compiled[1], eager[1]),
            "collectives": sum(r.collectives_before for r in reps)}


def fx_bucket_gather_scatter(rank, world):
    """Bucketed all-gathers and reduce-scatters give exactly the unbucketed results."""
    import funcol
    from torch.fx.experimental.proxy_tensor import make_fx

    from commrt.fx import overlap_and_bucket

    def f(a, b, wt):
        g1 = funcol.all_gather(a @ wt, dist.group.WORLD)
        g2 = funcol.all_gather((b @ wt)[:3], dist.group.WORLD)
        r1 = funcol.reduce_scatter(a @ wt, "sum", dist.group.WORLD)
        r2 = funcol.reduce_scatter(b @ wt, "sum", dist.group.WORLD)
        c = torch.relu(wt @ wt) @ wt
        return g1 + 1, g2 * 2, r1 - 1, r2 + c[:4]

    args = (make(80, rank, (8, 16), torch.float32), make(81, rank, (8, 16), torch.float32),
            make(82, 0, (16, 16), torch.float32))
    gm = make_fx(f, tracing_mode="fake")(*args)
    ref = gm(*args)
    rep = overlap_and_bucket(gm)
    got = gm(*args)
    return {"buckets": rep.buckets,
            "equal": all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))}


def tuner_gate(rank, world):
    """The tuner's correctness gate on gloo: the process group's bf16 sums pass, a variant
    that leaves the input as it was is counted wrong, on every rank alike."""
    import commrt
    from commrt import bench

    comm = commrt.init()
    nccl = bench.Variant("nccl", "nccl")
    out = {"pg": [bench._wrong(comm, nccl, n, torch.bfloat16, 5) for n in (7, 4097, 65536)]}
    real = bench._make_call
    bench._make_call = lambda comm_, v, x: (lambda: None)  # a kernel that never sums
    try:
        out["noop"] = bench._wrong(comm, nccl, 4097, torch.bfloat16, 6)
    finally:
        bench._make_call = real
    # a forced variant runs through the user's path, forced as COMMRT_ALGO would force it,
    # and leaves the communicator it came from on auto
    view = bench.forced_view(comm, "nccl")
    x = make(90, rank, (33,), torch.float32)
    view.all_reduce(x)
    ref = sum(make(90, r, (33,), torch.float32).double() for r in range(world))
    out["forced"] = (view.plan(x).reason, comm.config.algo,
                     bool(torch.allclose(x.double(), ref)))
    # the eager ranking: checked, then timed in interleaved rounds (on gloo: the group only)
    raw: list = []
    rows = bench._tune_eager(comm, [4096, 8192], torch.bfloat16, {}, raw, [], None)
    out["eager"] = ([r["max_bytes"] for r in rows],
                    [c["algorithm"] for r in rows for c in r["ranking"]],
                    all(c["us"] > 0 for r in rows for c in r["ranking"]),
                    [(r["bytes"], r["wrong"]) for r in raw])
    return out


def copy_engine_group(rank, world, names, data_bytes):
    """The copy-engine group over shared-memory workspaces: functional all_reduce + wait,
    dist.all_reduce, sum and avg, pieces, against float64; results bitwise alike."""
    from multiprocessing import shared_memory

    from commrt import copy_engine_group as ceg
    from commrt.symm_mem.workspace import Workspace

    blocks = [shared_memory.SharedMemory(name=n) for n in names]
    buffers = [torch.frombuffer(b.buf, dtype=torch.uint8) for b in blocks]
    ws = Workspace(buffers, rank, data_bytes, 256, "ce-test")
    ws.clear()
    dist.barrier()
    # as under init_process_group(device_id=...): new_group asks the new group's backend
    dist.group.WORLD.bound_device_id = torch.device("cuda", rank)
    try:
        g = ceg.make(dist.group.WORLD, ws)
    finally:
        dist.group.WORLD.bound_device_id = None
    c10d = torch.ops._c10d_functional
    out = {"backend": dist.get_backend(g), "bad": [], "results": []}
    cases = [(1, torch.float32), (7, torch.bfloat16), (4097, torch.float16),
             (40_000, torch.float32), (33, torch.bfloat16)]
    for call, (n, dtype) in enumerate(cases):
        for op in ("sum", "avg"):
            x = make(call, rank, (n,), dtype)
            if call == 2:  # through the eager API
                y = x.clone()
                dist.all_reduce(y, op=dist.ReduceOp.AVG if op == "avg" else dist.ReduceOp.SUM,
                                group=g)
            else:
                y = c10d.wait_tensor(c10d.all_reduce(x, op, g.group_name))
            ref = reference(call, world, (n,), dtype) / (world if op == "avg" else 1)
            if not close(y, ref):
                out["bad"].append((n, str(dtype), op, float((y.double() - ref).abs().max())))
            out["results"].append(y.float().tolist())  # exact: plain floats cross processes
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX, group=g)
    except Exception as exc:  # noqa: BLE001
        out["max"] = str(exc)
    out["gather_ok"] = []
    for n in (1, 4097, 40_000):  # 40,000 float32 take several slots' worth: pieces
        x = make(50 + n % 7, rank, (n,), torch.float32)
        y = c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, g.group_name))
        out["gather_ok"].append(all(torch.equal(y[r * n:(r + 1) * n],
                                                make(50 + n % 7, r, (n,), torch.float32))
                                    for r in range(world)))
    out.update(_exchanges(rank, world, g))
    out.update(_compiled_on_copy_engine(rank, world, g))
    out["err"] = int(ws.err.item())
    dist.barrier()
    del ws, buffers
    for b in blocks:
        b.close()
    return out


def _exchanges(rank, world, g):
    """``exchange``: the peer's parts, packed, for odd sizes, several dtypes and 2-D parts;
    the landing buffers grow once; bad calls refused by name."""
    from commrt.errors import CommrtError

    c10d = torch.ops._c10d_functional
    peer = 1 - rank
    ok = []
    cases = [((1, 7), torch.float32, 1 << 12), (((3, 5), 4097), torch.bfloat16, 1 << 16),
             ((33, 40_000), torch.float16, 1 << 18), ((2,), torch.float32, 1 << 18)]
    for call, (shapes, dtype, total) in enumerate(cases):
        shapes = [s if isinstance(s, tuple) else (s,) for s in shapes]
        parts = [make(60 + call * 4 + i, rank, s, dtype) for i, s in enumerate(shapes)]
        want = torch.cat([make(60 + call * 4 + i, peer, s, dtype).reshape(-1)
                          for i, s in enumerate(shapes)])
        y = c10d.wait_tensor(g.exchange(parts, 16 * call, total))
        ok.append(torch.equal(y, want) and torch.equal(parts[0], make(60 + call * 4, rank,
                                                                      shapes[0], dtype)))
    refused = []
    x = torch.ones(8)
    for args in (([x], 8, 1024), ([x], 1000, 1024), ([x, x.half()], 0, 1024)):
        try:
            g.exchange(*args)
        except CommrtError as exc:
            refused.append(str(exc))
    return {"exchange_ok": ok, "landing_grown": len(g._keep), "exchange_refused": refused}


def _compiled_on_copy_engine(rank, world, g):
    """commrt.fx with copy_engine=True on a compiled step: its sum and avg all-reduces run
    as all-gathers on ``g`` plus a sum; against float64, and alike on every rank."""
    import torch._inductor.config as ic
    import torch.distributed._functional_collectives as fc

    import commrt.fx
    from commrt.fx import comm_groups

    comm_groups._BY_NAME[(dist.group.WORLD.group_name, comm_groups.COPY_ENGINE)] = g.group_name
    ws = [make(80 + i, 0, (32, 32), torch.bfloat16) for i in range(3)]

    def step(x):
        a = fc.all_reduce(x @ ws[0], "sum", dist.group.WORLD)
        b = fc.all_reduce(torch.relu(x @ ws[1]), "avg", dist.group.WORLD)
        c = fc.all_reduce(x @ ws[2], "sum", dist.group.WORLD)  # may share a's bucket
        return a * 2, b + 1, c - 1

    xs = [make(90, r, (8, 32), torch.bfloat16) for r in range(world)]
    ref_a = sum((x.double() @ ws[0].double()) for x in xs) * 2
    ref_b = sum(torch.relu(x.double() @ ws[1].double()) for x in xs) / world + 1
    ref_c = sum((x.double() @ ws[2].double()) for x in xs) - 1
    commrt.fx.last_reports.clear()
    torch._dynamo.reset()
    exchanged = []
    real = type(g).exchange

    def counted(self, parts, offset, total):
        exchanged.append(sum(p.numel() for p in parts))
        return real(self, parts, offset, total)

    with commrt.fx.installed(fuse_rmsnorm=False, copy_engine=True), \
            ic.patch(fx_graph_cache=False), mock.patch.object(type(g), "exchange", counted), \
            mock.patch("commrt.fx.overlap.CE_SLACK", 0.0):  # however little compute
        got = torch.compile(step, fullgraph=True)(xs[rank])
    reps = [r for n, r in commrt.fx.last_reports if n == "overlap"]
    errs = [float((y.double() - ref).norm() / ref.norm())
            for y, ref in zip(got, (ref_a, ref_b, ref_c), strict=True)]
    return {"compiled_close": max(errs) < 1e-2, "compiled_err": errs,  # bf16 matmuls
            "compiled_moved": sum(r.limited for r in reps),
            "compiled_buckets": sum(r.buckets for r in reps),
            "compiled_exchanged": exchanged,
            "compiled": [y.float().tolist() for y in got]}
