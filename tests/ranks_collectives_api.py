"""Per-rank bodies of the all-gather / reduce-scatter API tests (gloo, two processes):
commrt's calls against torch's own on the same inputs."""

from __future__ import annotations

import torch
import torch.distributed as dist

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64)
SHAPES = ((1,), (7,), (4097,), (3, 5, 7), (0,))


def make(seed: int, rank: int, shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 101 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)


def _outcome(fn):
    """("ok", tensor) or ("error", exception type): the same failure either way is the point."""
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("error", type(exc).__name__)


def _gathers(comm, world, x):
    """(label, call) pairs that all-gather ``x``; each returns the output as [world * n]."""
    import commrt

    n = x.numel()

    def into(fn, out):
        fn(out, x)
        return out.reshape(-1)

    def waited(out):
        work = comm.all_gather_into_tensor(out, x, async_op=True)
        work.wait()
        return out.reshape(-1)

    flat = (world * n,)
    return [
        ("torch", lambda: into(dist.all_gather_into_tensor, x.new_empty((world * x.shape[0],
                                                                          *x.shape[1:])))),
        ("comm", lambda: into(comm.all_gather_into_tensor, x.new_empty(flat))),
        ("module", lambda: into(commrt.all_gather_into_tensor, x.new_empty(flat))),
        ("stacked", lambda: into(comm.all_gather_into_tensor, x.new_empty((world, *x.shape)))),
        ("strided out", lambda: into(comm.all_gather_into_tensor,
                                     x.new_empty((n, world)).t())),
        ("async", lambda: waited(x.new_empty(flat))),
        ("op", lambda: torch.ops.commrt.all_gather(x, world, comm.group_name).reshape(-1)),
    ]


def _scatters(comm, world, x, op):
    """(label, call) pairs that reduce-scatter ``x`` with ``op``; each returns the shard."""
    import commrt

    n = x.numel() // world
    opn = str(op).rsplit(".", 1)[-1].lower()

    def into(fn, out, **kw):
        fn(out, x, op=op, **kw)
        return out.reshape(-1)

    def waited():
        out = x.new_empty(n)
        comm.reduce_scatter_tensor(out, x, op=op, async_op=True).wait()
        return out

    return [
        ("torch", lambda: into(dist.reduce_scatter_tensor, x.new_empty((x.shape[0] // world,
                                                                         *x.shape[1:])))),
        ("comm", lambda: into(comm.reduce_scatter_tensor, x.new_empty(n))),
        ("module", lambda: into(commrt.reduce_scatter_tensor, x.new_empty(n))),
        ("strided out", lambda: into(comm.reduce_scatter_tensor, x.new_empty((n, 2))[:, 0])),
        ("async", waited),
        ("op", lambda: torch.ops.commrt.reduce_scatter(x, opn, world, comm.group_name)
         .reshape(-1)),
    ]


def _same(a, b) -> bool:
    if a[0] != b[0] or a[0] == "error":
        return a == b
    return a[1].dtype == b[1].dtype and torch.equal(a[1], b[1])


def semantics(rank, world):
    """Every dtype and shape, every spelling: bitwise what torch's own call gives (errors
    included), non-contiguous inputs and outputs, async handles, other ops; then the counts,
    the size errors and the plan."""
    import commrt

    comm = commrt.init()
    commrt.stats(reset=True)
    bad, seed, gathers, scatters = [], 0, 0, 0
    for dtype in DTYPES:
        for shape in SHAPES:
            seed += 1
            x = make(seed, rank, shape, dtype)
            cases = _gathers(comm, world, x) + [
                ("strided in", lambda x=x: _gather_strided(comm, world, x))]
            got = [(label, _outcome(fn)) for label, fn in cases]
            bad += [f"ag {dtype} {shape} {label}: {g}"[:200] for label, g in got[1:]
                    if not _same(got[0][1], g)]
            gathers += len(got) - 1
            y = make(seed, rank, (world * shape[0], *shape[1:]), dtype)
            ops = (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG)
            for op in ops:
                got = [(label, _outcome(fn)) for label, fn in _scatters(comm, world, y, op)]
                bad += [f"rs {dtype} {shape} {op} {label}: {g}"[:200] for label, g in got[1:]
                        if not _same(got[0][1], g)]
                scatters += sum(g[0] == "ok" for _, g in got[1:])
    ref = sum(make(seed, r, (world, 4, 3), torch.float64)[rank] for r in range(world))
    y = make(seed, rank, (world, 4, 3), torch.float64).transpose(1, 2)  # non-contiguous
    out = torch.empty(3, 4, dtype=torch.float64)
    comm.reduce_scatter_tensor(out, y)
    counts = commrt.stats(reset=True)
    return {"bad": bad, "gathers": gathers, "scatters": scatters, "counts": counts,
            "strided_rs": torch.equal(out, ref.t()), "errors": _errors(comm, world),
            "plan": str(comm.plan(torch.empty(8), kind="all_gather")),
            "work": type(comm.all_gather_into_tensor(torch.empty(2 * world), torch.ones(2),
                                                     async_op=True)).__name__}


def _gather_strided(comm, world, x):
    """A non-contiguous input (every other element of a larger tensor)."""
    wide = torch.stack([x, torch.zeros_like(x)], dim=-1)[..., 0]
    out = x.new_empty(world * x.numel())
    comm.all_gather_into_tensor(out, wide)
    return out


def _errors(comm, world) -> dict:
    """What a wrong output size or dtype says."""
    res = {}
    for label, fn in (
        ("ag size", lambda: comm.all_gather_into_tensor(torch.empty(5), torch.ones(2))),
        ("ag dtype", lambda: comm.all_gather_into_tensor(torch.empty(2 * world,
                                                                     dtype=torch.float64),
                                                         torch.ones(2))),
        ("rs size", lambda: comm.reduce_scatter_tensor(torch.empty(3), torch.ones(2 * world))),
        ("rs type", lambda: comm.reduce_scatter_tensor(torch.empty(2), [1.0, 2.0])),
    ):
        try:
            fn()
            res[label] = "no error"
        except Exception as exc:
            res[label] = f"{type(exc).__name__}: {exc}"
    return res


def compiled(rank, world):
    """torch.compile(fullgraph=True) of the ops, the module calls and the methods."""
    import commrt

    comm = commrt.init()
    name = comm.group_name

    def by_op(x):
        g = torch.ops.commrt.all_gather(x * 2, world, name)
        return torch.ops.commrt.reduce_scatter(g + 1, "sum", world, name)

    def by_module(x):
        g = x.new_empty((world * x.shape[0], *x.shape[1:]))
        commrt.all_gather_into_tensor(g, x * 2)
        out = torch.empty_like(x)
        commrt.reduce_scatter_tensor(out, g + 1)
        return out

    def by_method(x):
        g = x.new_empty((world * x.shape[0], *x.shape[1:]))
        comm.all_gather_into_tensor(g, x * 2)
        out = torch.empty_like(x)
        comm.reduce_scatter_tensor(out, g + 1, op=dist.ReduceOp.SUM)
        return out

    x = make(3, rank, (6, 5), torch.float32)
    ref = by_method(x)
    mine = make(3, rank, (6, 5), torch.float64)
    want = world * (2 * mine + 1)  # every rank's chunk `rank` of the gather is my x
    res = {"value": bool(torch.allclose(ref.double(), want))}
    for label, fn in (("op", by_op), ("module", by_module), ("method", by_method)):
        for backend in ("eager", "aot_eager", "inductor"):
            got = torch.compile(fn, fullgraph=True, backend=backend)(x)
            res[f"{label}/{backend}"] = bool(torch.equal(got, ref))
            torch._dynamo.reset()
    return res


def world_one(rank, world):
    """A group of one rank: identity copies, counted as such; a non-identity op goes to the
    process group."""
    import commrt

    groups = [dist.new_group([r]) for r in range(world)]
    comm = commrt.Communicator(groups[rank])
    commrt.stats(reset=True)
    x = make(1, rank, (3, 4), torch.float32)
    out = torch.empty(12)
    comm.all_gather_into_tensor(out, x)
    shard = torch.empty(3, 4)
    work = comm.reduce_scatter_tensor(shard, x, async_op=True)
    work.wait()
    return {"ag": torch.equal(out, x.reshape(-1)), "rs": torch.equal(shard, x),
            "counts": commrt.stats(reset=True)}
