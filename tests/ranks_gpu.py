"""Per-rank bodies of the multi-GPU tests (run by ``spawn.run`` with NCCL)."""

from __future__ import annotations

import torch
import torch.distributed as dist

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}
MIB = 1 << 20


def inputs(seed: int, world: int, n: int, dtype, device) -> list[torch.Tensor]:
    """Every rank's input for this case (each rank can build the float64 reference)."""
    out = []
    for r in range(world):
        g = torch.Generator(device=device).manual_seed(seed * 131 + r)
        x = torch.randn(n, generator=g, device=device, dtype=torch.float32)
        if n > 2:
            x[1] = -0.0
        out.append(x.to(dtype))
    return out


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(got.float()).all():
        return float("inf")
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def same_on_all_ranks(t: torch.Tensor) -> bool:
    bits = t.contiguous().view(-1).view(torch.uint8)
    gathered = [torch.empty_like(bits) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, bits)
    return all(torch.equal(gathered[0], g) for g in gathered)


def sizes_for(algo: str, dtype, comm) -> list[int]:
    elt = torch.empty((), dtype=dtype).element_size()
    sizes = [1, 7, 4097, MIB + 3, 64 * MIB // elt]
    if algo == "one_shot_push":
        return [n for n in sizes if n * elt <= comm.facts.push_bytes] + [comm.facts.push_bytes
                                                                         // elt]
    return sizes


def correctness(rank, world):
    """Every algorithm x dtype x size, eager: float64 reference and bitwise across ranks."""
    import commrt
    from commrt.dispatch.dispatcher import Query, why_not

    comm = commrt.init()
    dev = comm.device
    failures, ran = [], []
    algos = ["one_shot_push", "one_shot", "two_shot", "two_shot_push", "symm_one_shot",
             "symm_two_shot", "nccl"]
    seed = 0
    for algo in algos:
        for dtype in DTYPES:
            for n in sizes_for(algo, dtype, comm):
                seed += 1
                q = Query(n * torch.empty((), dtype=dtype).element_size(), dtype)
                if why_not(algo, q, comm.facts):
                    continue
                xs = inputs(seed, world, n, dtype, dev)
                ref = sum(x.double() for x in xs)
                x = xs[rank].clone()
                comm.run_algorithm(algo, x)
                err = rel_err(x, ref)
                same = same_on_all_ranks(x)
                ran.append((algo, str(dtype), n))
                if err > TOL[dtype] or (algo != "nccl" and not same):
                    failures.append(f"{algo} {dtype} n={n}: rel err {err:.2e}, same={same}")
    # two_shot_push in rounds (launch configs the tuner may pick), then back to back with
    # no sync between calls: a round read before its peer wrote it would show here
    rounds = ({"block": 4096, "warps": 16, "blocks": 528, "round_tiles": 1},
              {"block": 2048, "warps": 8, "blocks": 1056, "round_tiles": 2})
    for cfg in rounds:
        for dtype in DTYPES:
            elt = torch.empty((), dtype=dtype).element_size()
            for n in (7, 4097, MIB + 3, 16 * MIB + 5, 64 * MIB // elt):
                seed += 1
                xs = inputs(seed, world, n, dtype, dev)
                x = xs[rank].clone()
                comm.run_algorithm("two_shot_push", x, cfg)
                err, same = rel_err(x, sum(t.double() for t in xs)), same_on_all_ranks(x)
                ran.append(("two_shot_push", str(dtype), n))
                if err > TOL[dtype] or not same:
                    failures.append(f"two_shot_push {cfg} {dtype} n={n}: rel err {err:.2e}, "
                                    f"same={same}")
        batch = [inputs(seed + 1000 + i, world, MIB + 3, torch.bfloat16, dev) for i in range(20)]
        outs = [xs[rank].clone() for xs in batch]
        for x in outs:
            comm.run_algorithm("two_shot_push", x, cfg)
        for xs, x in zip(batch, outs, strict=True):
            if rel_err(x, sum(t.double() for t in xs)) > TOL[torch.bfloat16]:
                failures.append(f"two_shot_push {cfg} back to back: wrong sum")
    comm.check_health()
    return {"failures": failures, "ran": len(ran),
            "algos": sorted({a for a, _, _ in ran})}


def workspace_and_out(rank, world):
    """comm.empty inputs (no copy in), out=, non-contiguous views, async_op."""
    import commrt

    comm = commrt.init()
    dev = comm.device
    failures = []
    for i, algo in enumerate(["one_shot", "two_shot", "two_shot_push", "symm_two_shot",
                              "one_shot_push"]):
        for n in ((65536,) if algo.startswith("symm") else (4097, 65536)):
            xs = inputs(100 + i * 7 + n, world, n, torch.bfloat16, dev)
            ref = sum(x.double() for x in xs)
            w = comm.empty(n, torch.bfloat16)
            w.copy_(xs[rank])
            comm.run_algorithm(algo, w)
            if rel_err(w, ref) > 1e-2 or not same_on_all_ranks(w):
                failures.append(f"{algo} on comm.empty n={n}: {rel_err(w, ref):.2e}")
    # two_shot_push in place on comm.empty (no final copy: the peers' shards land in place)
    # back to back with ordinary calls, fresh data each time, one and more rounds
    for i in range(16):
        n, cfg = (8 * 2**20 + 3, {}) if i % 4 < 2 else (3 * 2**20 + 5, {"round_tiles": 2})
        xs = inputs(500 + i, world, n, torch.bfloat16, dev)
        ref = sum(x.double() for x in xs)
        t = comm.empty(n, torch.bfloat16) if i % 2 == 0 else torch.empty_like(xs[rank])
        t.copy_(xs[rank])
        comm.run_algorithm("two_shot_push", t, cfg)
        if rel_err(t, ref) > 1e-2 or not same_on_all_ranks(t):
            failures.append(f"two_shot_push back to back, call {i} (comm.empty: {i % 2 == 0}): "
                            f"{rel_err(t, ref):.2e}")
    xs = inputs(7, world, 64 * 33, torch.float32, dev)
    ref = sum(x.double() for x in xs).view(64, 33)
    x = xs[rank].view(64, 33)
    out = torch.empty_like(x)
    commrt.all_reduce(x, out=out)
    if rel_err(out, ref) > 1e-5 or not torch.equal(x, xs[rank].view(64, 33)):
        failures.append("out= changed the input or summed wrong")
    big = xs[rank].view(64, 33).clone()
    view = big[:, ::2]
    expect = ref[:, ::2]
    work = commrt.all_reduce(view, async_op=True)
    work.wait()
    untouched = torch.equal(big[:, 1::2], xs[rank].view(64, 33)[:, 1::2])
    if rel_err(view, expect) > 1e-5 or not untouched:
        failures.append("non-contiguous async all_reduce wrong or touched other elements")
    return {"failures": failures}


def graph_capture(rank, world):
    """Every custom algorithm inside one CUDA graph, replayed with fresh data each time."""
    import commrt
    from commrt.dispatch.dispatcher import Query, why_not

    comm = commrt.init()
    dev = comm.device
    failures = []
    algos = ["one_shot_push", "one_shot", "two_shot", "two_shot_push", "symm_one_shot",
             "symm_two_shot", "nccl"]
    sizes = (7, 4097, 300_001)
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        elt = torch.empty((), dtype=dtype).element_size()
        cases = [(a, n) for a in algos for n in sizes
                 if why_not(a, Query(n * elt, dtype, mode="graph"), comm.facts) is None]
        bufs = {c: torch.empty(c[1], dtype=dtype, device=dev) for c in cases}
        stage = {c: torch.empty(c[1], dtype=dtype, device=dev) for c in cases}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for c in cases:  # warm up on the capture stream
                bufs[c].copy_(stage[c].normal_())
                comm.run_algorithm(c[0], bufs[c])
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for c in cases:
                bufs[c].copy_(stage[c])
                comm.run_algorithm(c[0], bufs[c])
        for replay in range(12):
            refs = {}
            for j, c in enumerate(cases):
                xs = inputs(1000 * replay + j, world, c[1], dtype, dev)
                stage[c].copy_(xs[rank])
                refs[c] = sum(x.double() for x in xs)
            g.replay()
            torch.cuda.synchronize()
            for c in cases:
                err = rel_err(bufs[c], refs[c])
                if err > TOL[dtype] or not same_on_all_ranks(bufs[c]):
                    failures.append(f"graph {c[0]} {dtype} n={c[1]} replay {replay}: {err:.2e}")
        del g
    comm.check_health()
    return {"failures": failures}


def compiled(rank, world):
    """torch.compile(fullgraph=True) of a function that calls commrt.all_reduce."""
    import commrt

    commrt.init()
    dev = torch.device("cuda", rank)

    def f(x, w):
        y = x @ w
        commrt.all_reduce(y)
        return torch.relu(y) + 1

    cf = torch.compile(f, fullgraph=True)
    failures = []
    for n in (8, 64, 512):
        xs = inputs(n, world, n * 128, torch.bfloat16, dev)
        w = torch.randn(128, 128, device=dev, dtype=torch.bfloat16,
                        generator=torch.Generator(device=dev).manual_seed(5))
        ref = f(xs[rank].view(n, 128).clone(), w)
        got = cf(xs[rank].view(n, 128).clone(), w)
        if rel_err(got, ref.double()) > 2e-2:
            failures.append(f"compiled n={n}: {rel_err(got, ref.double()):.2e}")
    return {"failures": failures}


def soak(rank, world, calls=10_000):
    """Back-to-back calls with changing data, NCCL interleaved, every result checked."""
    import commrt

    comm = commrt.init()
    dev = comm.device
    k = 8
    sizes = [(4096, "one_shot_push"), (40_000, "one_shot"), (200_003, "two_shot"),
             (100_001, "two_shot_push")]
    cases = []
    for i in range(k):
        for n, algo in sizes:
            xs = inputs(5000 + i * 3 + n, world, n, torch.float32, dev)
            cases.append((algo, xs[rank], sum(x.double() for x in xs).float()))
    wrong = torch.zeros((), dtype=torch.int64, device=dev)
    side = torch.ones(1000, device=dev)
    for i in range(calls):
        algo, x, ref = cases[i % len(cases)]
        y = x.clone()
        comm.run_algorithm(algo, y)
        wrong += (~torch.isclose(y, ref, rtol=1e-5, atol=1e-5)).sum()
        if i % 7 == 0:
            side.fill_(1.0)
            dist.all_reduce(side)
            wrong += (side != world).sum()
    comm.check_health()
    return {"wrong": int(wrong.item()), "calls": calls}


def pdl_after_producers(rank, world):
    """one_shot_push and two_shot_push launched as programmatic dependents (pdl=1) right
    after the kernel that writes their input (an elementwise op, a GEMM), back to back,
    eager and in a CUDA graph: a read before the producer's memory is visible would show
    as a wrong sum."""
    import commrt

    comm = commrt.init()
    dev = comm.device
    failures = []
    cfgs = (("one_shot_push", {"block": 1024, "warps": 4, "blocks": 32, "pdl": 1}),
            ("one_shot_push", {"block": 512, "warps": 4, "blocks": 132, "pdl": 1}),
            ("two_shot_push", {"block": 2048, "warps": 8, "blocks": 132, "round_tiles": 0,
                               "pdl": 1}),
            ("two_shot_push", {"block": 1024, "warps": 4, "blocks": 528, "round_tiles": 1,
                               "pdl": 1}))
    k = 4096  # the GEMM's inner size: a producer that runs long enough to overlap
    for dtype in DTYPES:
        elt = torch.empty((), dtype=dtype).element_size()
        for n in (7, 4097, 64 * 128, comm.facts.push_bytes // elt, (1 << 20) + 3):
            cols = 128 if n % 128 == 0 else 0
            cases = []
            for i in range(24):
                if cols and i % 2:  # x = a @ b, every rank's product rebuilt here
                    ab = [(inputs(9000 + i, world, n // cols * k, dtype, dev)[r].view(-1, k),
                           inputs(9500 + i, world, k * cols, dtype, dev)[r].view(k, cols))
                          for r in range(world)]
                    srcs = [a @ b for a, b in ab]
                    prod = (lambda x, a=ab[rank][0], b=ab[rank][1], c=cols:
                            torch.mm(a, b, out=x.view(-1, c)))
                else:  # x = 2 * src
                    src = inputs(9000 + i, world, n, dtype, dev)
                    srcs = [2 * s_ for s_ in src]
                    prod = lambda x, s_=src[rank]: torch.mul(s_, 2, out=x)  # noqa: E731
                cases.append((prod, sum(t.double() for t in srcs).reshape(-1)))
            for algo, cfg in cfgs:
                if algo == "one_shot_push" and n * elt > comm.facts.push_bytes:
                    continue
                x = torch.empty(n, dtype=dtype, device=dev)
                outs = [torch.empty_like(x) for _ in cases]

                def step(j, x=x, outs=outs, algo=algo, cfg=cfg, cases=cases):
                    cases[j][0](x)
                    comm.run_algorithm(algo, x, cfg)
                    outs[j].copy_(x)
                for j in range(len(cases)):
                    step(j)
                bad = [j for j, (_, ref) in enumerate(cases)
                       if rel_err(outs[j], ref) > TOL[dtype] or not same_on_all_ranks(outs[j])]
                if bad:
                    failures.append(f"eager {algo} {cfg} {dtype} n={n}: calls {bad} wrong")
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    step(0)
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=s):
                    for j in range(len(cases)):
                        step(j)
                for replay in range(5):
                    for o in outs:
                        o.fill_(float("nan"))
                    g.replay()
                    torch.cuda.synchronize()
                    bad = [j for j, (_, ref) in enumerate(cases)
                           if rel_err(outs[j], ref) > TOL[dtype]]
                    if bad:
                        failures.append(f"graph {algo} {cfg} {dtype} n={n} replay {replay}: "
                                        f"calls {bad} wrong")
                del g
    comm.check_health()
    return {"failures": failures}


def timeout(rank, world):
    """Rank 1 skips one call the others make: rank 0's kernel gives up and the host names
    peer 1."""
    import commrt

    comm = commrt.init()
    x = torch.ones(1024, device=comm.device)
    comm.run_algorithm("one_shot", x)
    torch.cuda.synchronize()
    dist.barrier()
    message = ""
    if rank != 1:
        comm.run_algorithm("one_shot", x)
        torch.cuda.synchronize()
        try:
            comm.check_health()
        except commrt.PeerTimeoutError as exc:
            message = str(exc)
    dist.barrier()
    return {"message": message}


def process_group_semantics(rank, world):
    """The CPU suite's drop-in checks on NCCL: odd shapes and dtypes, COMMRT_CHECK, the op
    captured in a CUDA graph."""
    import commrt

    comm = commrt.init()
    dev = comm.device
    failures = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                  torch.int64):
        for shape in ((), (0,), (1,), (7,), (4097,), (3, 5, 7)):
            xs = []
            for r in range(world):
                g = torch.Generator(device=dev).manual_seed(17 + r)
                xs.append(torch.randn(shape, generator=g, device=dev, dtype=torch.float64)
                          .mul(100).to(dtype))
            ref = sum(x.double() for x in xs)
            x = xs[rank].clone()
            commrt.all_reduce(x)
            tol = TOL.get(dtype, 1e-12 if dtype == torch.float64 else 0.0)
            if not torch.allclose(x.double(), ref, rtol=tol, atol=tol):
                failures.append(f"{dtype} {shape}")
    # the functional op inside CUDA-graph capture, replayed with fresh data
    stage = torch.empty(4097, device=dev)
    out = torch.empty(4097, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out.copy_(torch.ops.commrt.all_reduce(stage.normal_(), comm.group_name))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out.copy_(torch.ops.commrt.all_reduce(stage, comm.group_name))
    for replay in range(5):
        xs = inputs(300 + replay, world, 4097, torch.float32, dev)
        stage.copy_(xs[rank])
        g.replay()
        torch.cuda.synchronize()
        if rel_err(out, sum(x.double() for x in xs)) > 1e-5:
            failures.append(f"op in graph, replay {replay}")
    return {"failures": failures}


def check_mode(rank, world):
    """COMMRT_CHECK=1 on NCCL: a shape mismatch raises on every rank, no hang."""
    import commrt

    comm = commrt.init()
    try:
        comm.all_reduce(torch.ones(4, 8 + rank, device=comm.device))
        return {"message": ""}
    except commrt.MismatchError as exc:
        return {"message": str(exc)}


def fused_rmsnorm(rank, world):
    """all_reduce_residual_rmsnorm: every fused kernel and the unfused path against float64,
    hidden sizes 2048-8192 and odd ones, batch 1-512, eager and CUDA graph; ranks agree."""
    import commrt
    from commrt.symm_mem.fused_rmsnorm import reference

    comm = commrt.init()
    dev = comm.device
    failures, ran = [], 0
    for algo in ("one_shot_push", "one_shot", "two_shot_push", "nccl", None):
        for dtype in DTYPES:
            for hidden in (2048, 4096, 8192, 5120 + 24, 1000 + 3):
                for batch in (1, 7, 32, 512):
                    if algo == "one_shot_push" and batch * hidden * 4 > comm.facts.push_bytes:
                        continue
                    g = torch.Generator(device=dev).manual_seed(batch * 7 + hidden)
                    xs = [torch.randn(batch, hidden, generator=g, device=dev).to(dtype)
                          for _ in range(world)]
                    res = torch.randn(batch, hidden, generator=g, device=dev).to(dtype)
                    w = torch.randn(hidden, generator=g, device=dev).to(dtype)
                    y, z = comm.all_reduce_residual_rmsnorm(xs[rank], res, w, 1e-5,
                                                             algorithm=algo)
                    ry, rz = reference(sum(x.double() for x in xs), res, w, 1e-5)
                    ey, ez = rel_err(y, ry), rel_err(z, rz.double())
                    same = same_on_all_ranks(y) and same_on_all_ranks(z)
                    ran += 1
                    if max(ey, ez) > 2 * TOL[dtype] or (algo != "nccl" and not same):
                        failures.append(f"{algo} {dtype} {batch}x{hidden}: {ey:.1e} {ez:.1e} "
                                        f"same={same}")
    # one_shot_push with a row's push shared by several programs (launch configs the
    # tuner may pick), odd hidden sizes included
    from commrt import custom

    for split in (2, 8):
        for dtype in DTYPES:
            for hidden in (4096, 5120 + 24, 1000 + 3):
                for batch in (1, 7, 32):
                    g = torch.Generator(device=dev).manual_seed(batch * 11 + hidden + split)
                    xs = [torch.randn(batch, hidden, generator=g, device=dev).to(dtype)
                          for _ in range(world)]
                    res = torch.randn(batch, hidden, generator=g, device=dev).to(dtype)
                    w = torch.randn(hidden, generator=g, device=dev).to(dtype)
                    y, z = torch.empty_like(res), torch.empty_like(res)
                    custom.run_fused("one_shot_push", comm.workspace, xs[rank], res, w, y, z,
                                     1e-5, {"warps": 4, "blocks": 132, "split": split},
                                     comm.config.spin_timeout)
                    ry, rz = reference(sum(x.double() for x in xs), res, w, 1e-5)
                    ey, ez = rel_err(y, ry), rel_err(z, rz.double())
                    same = same_on_all_ranks(y) and same_on_all_ranks(z)
                    ran += 1
                    if max(ey, ez) > 2 * TOL[dtype] or not same:
                        failures.append(f"one_shot_push split {split} {dtype} {batch}x{hidden}:"
                                        f" {ey:.1e} {ez:.1e} same={same}")
    # inside a CUDA graph, replayed with fresh data
    for algo in ("one_shot_push", "one_shot", "two_shot_push"):
        x = torch.empty(16, 4096, device=dev, dtype=torch.bfloat16)
        res = torch.empty_like(x)
        # replicated, as in TP (two_shot normalises a row on its owner, with its weight)
        w = torch.randn(4096, device=dev, generator=torch.Generator(device=dev).manual_seed(5)
                        ).to(torch.bfloat16)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            comm.all_reduce_residual_rmsnorm(x.normal_(), res.normal_(), w, 1e-5, algorithm=algo)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            y, z = comm.all_reduce_residual_rmsnorm(x, res, w, 1e-5, algorithm=algo)
        for replay in range(5):
            xs = [t.view(16, 4096) for t in inputs(700 + replay, world, 16 * 4096,
                                                   torch.bfloat16, dev)]
            x.copy_(xs[rank])
            res.copy_(xs[0] * 0.5)  # replicated across ranks, as in TP
            graph.replay()
            torch.cuda.synchronize()
            ry, rz = reference(sum(t.double() for t in xs), res, w, 1e-5)
            if max(rel_err(y, ry), rel_err(z, rz.double())) > 2e-2:
                failures.append(f"graph {algo} replay {replay}")
    comm.check_health()
    return {"failures": failures, "ran": ran}


def copy_engine_group(rank, world, soak_calls=2000):
    """The copy-engine group: functional all_reduce (sum and avg) and all_gather on every
    dtype and odd sizes (including more than its workspace holds: pieces), against float64
    or the inputs, ranks bitwise alike; a call recorded and replayed as a graph;
    back-to-back calls with changing data and NCCL calls between; a CUDA graph replayed
    with fresh data; torch.compile."""
    from commrt import copy_engine_group as ceg

    dev = torch.device("cuda", rank)
    g = ceg.make(dist.group.WORLD)
    name = g.group_name
    c10d = torch.ops._c10d_functional
    failures = []
    data_elems = g.ws.data_bytes // 2
    for dtype in DTYPES:
        for n in (1, 7, 4097, MIB + 3, data_elems + 4099):
            for op in ("sum", "avg"):
                xs = inputs(n + len(op), world, n, dtype, dev)
                y = c10d.wait_tensor(c10d.all_reduce(xs[rank], op, name))
                ref = sum(x.double() for x in xs) / (world if op == "avg" else 1)
                err = rel_err(y, ref)
                if err > TOL[dtype] or not same_on_all_ranks(y):
                    failures.append(f"{op} {dtype} n={n}: {err:.2e}")
    slot = 2 * g.ws.capacity(torch.float32) // (16 * world) * 16
    for dtype in DTYPES:  # all-gather (what the overlap pass runs on this group)
        for n in (1, 7, 4097, MIB + 3, slot + 5):
            xs = inputs(n + 11, world, n, dtype, dev)
            y = c10d.wait_tensor(c10d.all_gather_into_tensor(xs[rank], world, name))
            if not torch.equal(y, torch.cat(xs)):
                failures.append(f"all_gather {dtype} n={n}")
    # one buffer, fresh data each call: run, recorded as a graph, replayed
    buf = torch.empty(MIB + 3, dtype=torch.float16, device=dev)
    for call in range(5):
        xs = inputs(900 + call, world, MIB + 3, torch.float16, dev)
        buf.copy_(xs[rank])
        dist.all_reduce(buf, group=g)
        err = rel_err(buf, sum(x.double() for x in xs))
        if err > TOL[torch.float16] or not same_on_all_ranks(buf):
            failures.append(f"same buffer, call {call}: {err:.2e}")
    if not g._graphs:
        failures.append("no call was recorded as a graph")
    # back to back: the caller's stream keeps writing the next input while the group's
    # stream reduces the last one; an NCCL all-reduce every 7th call
    n = 300_001
    base = inputs(7, world, n, torch.bfloat16, dev)
    ref = sum(x.double() for x in base)
    outs = []
    for call in range(soak_calls):
        x = base[rank] * (1 + call % 3)
        outs.append((call % 3, c10d.all_reduce(x, "sum", name)))
        if call % 7 == 0:
            t = torch.full((5,), float(rank + call), device=dev)
            dist.all_reduce(t)
            if t[0].item() != sum(r + call for r in range(world)):
                failures.append(f"nccl between, call {call}")
        if len(outs) > 4:
            k, y = outs.pop(0)
            y = c10d.wait_tensor(y)
            if call % 97 == 0 and rel_err(y, ref * (1 + k)) > TOL[torch.bfloat16]:
                failures.append(f"back to back, call {call}")
    for _, y in outs:
        c10d.wait_tensor(y)
    # CUDA graph
    buf = torch.empty(4097, dtype=torch.bfloat16, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = c10d.wait_tensor(c10d.all_reduce(buf.normal_(), "sum", name))
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        out = c10d.wait_tensor(c10d.all_reduce(buf * 2, "sum", name))
    for replay in range(10):
        xs = inputs(500 + replay, world, 4097, torch.bfloat16, dev)
        buf.copy_(xs[rank])
        graph.replay()
        torch.cuda.synchronize()
        ref = 2 * sum(x.double() for x in xs)
        if rel_err(out, ref) > TOL[torch.bfloat16] or not same_on_all_ranks(out):
            failures.append(f"graph replay {replay}: {rel_err(out, ref):.2e}")
    del graph

    # torch.compile (Inductor) around it
    def f(a, w):
        return torch.relu(c10d.wait_tensor(c10d.all_reduce(a @ w, "sum", name))) + 1

    w = torch.randn(128, 128, device=dev, dtype=torch.bfloat16,
                    generator=torch.Generator(device=dev).manual_seed(5))
    a = inputs(3, world, 64 * 128, torch.bfloat16, dev)
    got = torch.compile(f, fullgraph=True)(a[rank].view(64, 128), w)
    ref = torch.relu(sum((x.view(64, 128) @ w).double() for x in a)) + 1
    if rel_err(got, ref) > 2e-2:
        failures.append(f"compiled: {rel_err(got, ref):.2e}")
    failures += _exchanges(g, rank, world, dev)
    torch.cuda.synchronize()
    g.check_health()
    return {"failures": failures, "backend": dist.get_backend(g),
            "landing_mib": g._landing[0].numel() >> 20 if g._landing else 0}


def _exchanges(g, rank, world, dev) -> list[str]:
    """``exchange`` (what the overlap pass runs at world size 2): the peers' parts, packed,
    on every dtype and odd sizes; back to back with fresh data (recorded graphs replayed)
    and the caller rewriting the parts; the pass on a compiled step, against float64."""
    c10d = torch.ops._c10d_functional
    failures = []
    peers = [p for p in range(world) if p != rank]
    for dtype in DTYPES:
        for sizes in ((1,), (7, 4097), (MIB + 3, 5, 3 * 4099)):
            xs = [inputs(700 + i + 3 * len(sizes), world, n, dtype, dev)
                  for i, n in enumerate(sizes)]
            y = c10d.wait_tensor(g.exchange([x[rank] for x in xs], 4096, 64 * MIB))
            if not torch.equal(y, torch.cat([torch.cat([x[p] for x in xs]) for p in peers])):
                failures.append(f"exchange {dtype} {sizes}")
    n = 300_001
    base = inputs(17, world, n, torch.bfloat16, dev)
    pending = []
    for call in range(600):  # two landing places in turn; one result unread at a time
        x = base[rank] * (1 + call % 3)
        pending.append((call % 3, g.exchange([x], (call % 2) * MIB, 64 * MIB)))
        x.add_(1)  # the caller's stream rewrites the part: the pack already has it
        if len(pending) > 1:
            k, y = pending.pop(0)
            y = c10d.wait_tensor(y)
            if call % 53 == 0 and not torch.equal(
                    y, torch.cat([base[p] * (1 + k) for p in peers])):
                failures.append(f"exchange back to back, call {call}")
    for _, y in pending:
        c10d.wait_tensor(y)
    if not any(k[0] == "pull" for k in g._graphs):
        failures.append("no exchange was recorded as a graph")
    failures += _compiled_exchanges(rank, world, dev)
    return failures


def _compiled_exchanges(rank, world, dev) -> list[str]:
    """The pass with ``copy_engine=True`` (its own copy-engine group) on a compiled step."""
    from unittest import mock

    import torch._inductor.config as ic
    import torch.distributed._functional_collectives as fc

    import commrt.fx

    gen = torch.Generator(device=dev).manual_seed(11)
    ws = [torch.randn(256, 256, device=dev, dtype=torch.bfloat16, generator=gen) / 16
          for _ in range(4)]

    def step(x):
        outs = []
        for i, w in enumerate(ws):
            x = torch.relu(x @ w)
            outs.append(fc.all_reduce(x * (i + 1), "avg" if i == 3 else "sum",
                                      dist.group.WORLD))
        return outs

    xs = inputs(23, world, 64 * 256, torch.bfloat16, dev)
    refs = []
    for x in xs:
        x = x.view(64, 256)
        outs = []
        for i, w in enumerate(ws):
            x = torch.relu(x @ w)
            outs.append(x.double() * (i + 1))
        refs.append(outs)
    refs = [sum(r[i] for r in refs) / (world if i == 3 else 1) for i in range(4)]
    torch._dynamo.reset()
    failures = []
    with commrt.fx.installed(fuse_rmsnorm=False, copy_engine=True), \
            ic.patch(fx_graph_cache=False), \
            mock.patch("commrt.fx.overlap.CE_SLACK", 0.0):  # however little compute
        fn = torch.compile(step, fullgraph=True)
        for call in range(3):  # the second and third replay recorded pulls
            got = fn(xs[rank].view(64, 256))
            for i, (y, ref) in enumerate(zip(got, refs, strict=True)):
                if rel_err(y, ref) > 2e-2 or not same_on_all_ranks(y):
                    failures.append(f"compiled exchange {call}, output {i}: "
                                    f"{rel_err(y, ref):.2e}")
    reps = [r for name, r in commrt.fx.last_reports if name == "overlap"]
    if sum(r.limited for r in reps) == 0:
        failures.append("compiled: no all-reduce moved to the copy-engine group")
    torch._dynamo.reset()
    return failures
