"""Per-rank bodies of the multi-GPU all-gather / reduce-scatter tests: every algorithm
through the Communicator against float64 references, eager and in CUDA graphs, and the
custom ops under torch.compile."""

from __future__ import annotations

import torch
import torch.distributed as dist

SIZES = (1, 7, 4097, (1 << 20) + 3)  # elements per rank
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ALGOS = {"all_gather": ("ag_push", "ag_bw", "multimem_ag", "nccl"),
         "reduce_scatter": ("rs_pull", "rs_push", "symm_rs", "nccl")}


def _data(seed: int, rank: int, n: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    return torch.randn(n, generator=g, dtype=torch.float64).to(dtype).cuda()


def _case(comm, op: str, algo: str, n: int, dtype, seed: int, graph: bool) -> str | None:
    """None when ``algo`` gives the float64 answer, "" when it cannot run this case."""
    from commrt.bench import forced_view, sum_bound
    from commrt.dispatch.dispatcher import Query, why_not

    world, rank = comm.world_size, comm.rank
    out_n = n * world if op == "all_gather" else n
    q = Query(out_n * torch.empty((), dtype=dtype).element_size(), dtype, "sum",
              "graph" if graph else "eager", "cuda", op)
    if why_not(algo, q, comm.facts):
        return ""
    in_n = n if op == "all_gather" else n * world
    x = _data(seed, rank, in_n, dtype)
    out = torch.empty(out_n, dtype=dtype, device="cuda")
    view = forced_view(comm, algo, op)
    fn = view.all_gather_into_tensor if op == "all_gather" else view.reduce_scatter_tensor
    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(out, x)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            fn(out, x)
        x.copy_(_data(seed + 1, rank, in_n, dtype))  # fresh data, replayed
        seed += 1
        g.replay()
    else:
        fn(out, x)
    torch.cuda.synchronize()
    comm.check_health()
    every = [_data(seed, r, in_n, dtype).double() for r in range(world)]
    if op == "all_gather":
        ok = torch.equal(out.double(), torch.cat(every))
    else:
        ref = sum(t.view(world, n)[rank] for t in every)
        mag = sum(t.view(world, n)[rank].abs() for t in every)
        ok = bool(((out.double() - ref).abs() <= sum_bound(mag, dtype, world)).all())
    return None if ok else f"{op} {algo} {dtype} n={n} graph={graph}"


def correctness(rank, world):
    """Every algorithm x dtype x size, eager and captured."""
    import commrt

    comm = commrt.init()
    failures, ran, seed = [], set(), 0
    for op, algos in ALGOS.items():
        for algo in algos:
            for dtype in DTYPES:
                for n in SIZES:
                    for graph in (False, True):
                        seed += 2
                        bad = _case(comm, op, algo, n, dtype, seed, graph)
                        if bad:
                            failures.append(bad)
                        if bad != "":
                            ran.add(algo)
    dist.barrier()
    return {"failures": failures, "algos": sorted(ran), "stats": commrt.stats()}


def compiled(rank, world):
    """The ops under torch.compile (fullgraph, inductor) against float64, eager and
    replayed in a CUDA graph of the compiled function."""
    import commrt

    comm = commrt.init()
    name = comm.group_name

    def f(x):
        g = torch.ops.commrt.all_gather(x * 2, world, name)
        return torch.ops.commrt.reduce_scatter(g + 1, "sum", world, name)

    x = _data(5, rank, 4096, torch.float32).view(64, 64)
    got = torch.compile(f, fullgraph=True)(x)
    want = world * (2 * _data(5, rank, 4096, torch.float64).view(64, 64) + 1)
    failures = [] if torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5) else ["compiled"]
    return {"failures": failures}
