"""Host cost of one eager all-reduce call, per path, and where our path spends it.

    python benchmarks/bench_host_overhead.py [--out benchmarks/results/host_overhead]  # 1 GPU
    torchrun --nproc-per-node 2 benchmarks/bench_host_overhead.py [--out ...]

Times ``--calls`` back-to-back calls on the host only (the GPU queue absorbs them; the
median of ``--repeats`` bursts) for ``x.add_(1)`` on 1,024 floats (the yardstick),
the process group, PyTorch's symm-mem op, commrt's auto path, each kernel forced through
``comm.all_reduce``, and the same with Triton's own launch path; on two ranks or more
also an all-gather of the same bytes and a reduce-scatter back, the process group's and
commrt's. On one GPU the world is
one rank: auto is the identity, and the kernels are forced onto a one-rank workspace
carved from an ordinary allocation (the whole host path of a kernel call). Then the
share of each step of the replayed call, each timed alone. Prints the target ratio:
host time of ``comm.all_reduce`` (a kernel, ``--bytes``) over that of ``x.add_(1)``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

KERNELS = ("one_shot_push", "one_shot", "two_shot", "two_shot_push")


def host_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over bursts of host µs per call; ranks start each burst together."""
    for _ in range(50):
        fn()
    bursts = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        bursts.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    dist.barrier()
    return statistics.median(bursts)


def alone_ns(fn: Callable[[], object], calls: int = 20000) -> float:
    """Host ns of ``fn`` alone, less the cost of calling an empty lambda."""
    def per(f):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        return (time.perf_counter() - t0) / calls * 1e9
    empty = min(per(lambda: None) for _ in range(3))
    return max(0.0, min(per(fn) for _ in range(3)) - empty)


class _Forced:
    """A dispatcher that always answers one algorithm (the table's launch config unused)."""

    def __init__(self, algorithm: str):
        from commrt.dispatch.dispatcher import Decision

        self.d = Decision(algorithm, "forced by bench_host_overhead")

    def decide(self, *args, **kwargs):
        return self.d


def forced(comm, algorithm: str):
    """``comm`` with ``algorithm`` forced; on one rank, onto a one-rank workspace."""
    import copy

    view = copy.copy(comm)  # its own replay cache
    if comm.world_size == 1:
        from commrt.symm_mem.workspace import Workspace

        data, slot = 1 << 20, 1 << 16
        buf = torch.zeros(Workspace.total_bytes(1, data, slot), dtype=torch.uint8,
                          device=comm.device)
        view.workspace = Workspace([buf], 0, data, slot, "one-rank")
        view.workspace.clear()
        view._identity, view._fast = False, {}
        view._owned = view._workspace_ranges()
    view.dispatcher = _Forced(algorithm)
    return view


def torch_op(comm, x: torch.Tensor) -> Callable[[], object] | None:
    """PyTorch's two_shot_all_reduce_ on its own symmetric buffer (None where it cannot)."""
    try:
        import torch.distributed._symmetric_memory as symm

        buf = symm.empty(x.numel(), dtype=x.dtype, device=x.device)
        symm.rendezvous(buf, comm.group_name)
        buf.copy_(x)
        op = torch.ops.symm_mem.two_shot_all_reduce_
        op(buf, "sum", comm.group_name)
        torch.cuda.synchronize()
        return lambda: op(buf, "sum", comm.group_name)
    except Exception as exc:  # e.g. no symmetric memory for one rank on this torch
        if comm.rank == 0:
            print(f"torch two_shot_all_reduce_: skipped ({type(exc).__name__}: {exc})")
        return None


def paths(comm, x: torch.Tensor, small: torch.Tensor) -> dict[str, Callable[[], object]]:
    import commrt
    from commrt.symm_mem import launch

    out = {"x.add_(1) (1024 fp32)": lambda: small.add_(1),
           "dist.all_reduce": lambda: dist.all_reduce(x),
           "commrt.all_reduce (auto)": lambda: commrt.all_reduce(x),
           "comm.all_reduce (auto)": lambda: comm.all_reduce(x)}
    op = torch_op(comm, x)
    if op is not None:
        out["torch two_shot_all_reduce_ (own buffer)"] = op
    for algo in KERNELS:
        view = forced(comm, algo)
        out[f"comm.all_reduce ({algo})"] = lambda v=view: v.all_reduce(x)
    if comm.world_size > 1:  # the same bytes gathered, then scattered back
        shard = x[:x.numel() // comm.world_size].clone()
        full = torch.empty_like(x)
        out["dist.all_gather_into_tensor"] = lambda: dist.all_gather_into_tensor(full, shard)
        out["comm.all_gather_into_tensor (auto)"] = \
            lambda: comm.all_gather_into_tensor(full, shard)
        out["dist.reduce_scatter_tensor"] = lambda: dist.reduce_scatter_tensor(shard, full)
        out["comm.reduce_scatter_tensor (auto)"] = \
            lambda: comm.reduce_scatter_tensor(shard, full)
    slow = forced(comm, "one_shot")
    slow._fast = None

    def triton_path():
        launch.FAST = False
        try:
            slow.all_reduce(x)
        finally:
            launch.FAST = True
    out["comm.all_reduce (one_shot, Triton's launch path)"] = triton_path
    return out


def steps(view, x: torch.Tensor) -> dict[str, float]:
    """Host ns of each step of a replayed ``comm.all_reduce(x)``, each timed alone."""
    from commrt import communicator as c

    view.all_reduce(x)
    view.all_reduce(x)
    key = (x.data_ptr(), x.numel(), x.dtype, c._capturing())
    e = view._fast[key]
    stream = c._raw_stream(view._dev_index)
    parts = {
        "torch.compiler.is_compiling": lambda: c._is_compiling(),
        "key (data_ptr, numel, dtype, capturing)":
            lambda: (x.data_ptr(), x.numel(), x.dtype, c._capturing()),
        "replay cache lookup": lambda: view._fast.get(key),
        "is_contiguous": lambda: x.is_contiguous(),
        "current stream": lambda: c._raw_stream(view._dev_index),
        "Triton's C launcher": lambda: e[0](*e[1], stream, *e[2]),
        "count (stats)": lambda: c._COUNTS.__setitem__(e[3], c._COUNTS[e[3]] + 1),
    }
    ns = {k: alone_ns(f) for k, f in parts.items()}
    ns["whole call"] = alone_ns(lambda: view.all_reduce(x))
    ns["rest (frames, attribute reads)"] = max(0.0, ns["whole call"] - sum(
        v for k, v in ns.items() if k != "whole call"))
    torch.cuda.synchronize()
    return ns


def write(path: str, meta: dict, us: dict, ns: dict, ratio: float) -> None:
    with open(path + ".json", "w") as f:
        json.dump({"meta": meta, "host_us": us, "steps_ns": ns, "ratio": ratio}, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(f"# host µs per eager all-reduce call, {meta['world_size']}x {meta['device']}\n\n")
        f.write("\n".join(f"- {k}: `{v}`" for k, v in meta.items() if k != "config") + "\n\n")
        f.write(f"**target ratio** comm.all_reduce ({meta['kernel']}, {meta['bytes']} B) / "
                f"x.add_(1): **{ratio:.2f}** (target ≤ 1.5)\n\n| path | host µs |\n|---|---:|\n")
        f.write("".join(f"| {k} | {v:.2f} |\n" for k, v in us.items()))
        f.write("\n## steps of a replayed call (each alone)\n\n"
                "| step | ns | share |\n|---|---:|---:|\n")
        whole = ns["whole call"] or 1.0
        f.write("".join(f"| {k} | {v:.0f} | {v / whole:.0%} |\n" for k, v in ns.items()))


def init() -> tuple:
    import commrt

    if "WORLD_SIZE" not in os.environ:  # one GPU, no torchrun: a one-rank NCCL group
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29571"))
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return commrt.init()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--kernel", default="one_shot", choices=KERNELS,
                    help="the forced kernel whose host time the target ratio uses")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", help="path prefix: writes PREFIX_<gen>_ws<N>.json and .md")
    a = ap.parse_args()
    from commrt import bench
    from commrt.symm_mem import launch

    comm = init()
    x = torch.randn(a.bytes // 2, device="cuda").to(torch.bfloat16)
    small = torch.zeros(1024, device="cuda")
    us = {name: host_us(fn, a.calls, a.repeats) for name, fn in paths(comm, x, small).items()}
    ns = steps(forced(comm, a.kernel), x)
    ratio = us[f"comm.all_reduce ({a.kernel})"] / us["x.add_(1) (1024 fp32)"]
    if comm.rank == 0:
        print(f"fast launch: {launch.FAST} {launch.why_slow or ''}")
        for name, v in us.items():
            print(f"{name:<52} {v:8.2f} µs host per call")
        for name, v in ns.items():
            print(f"  {name:<50} {v:8.0f} ns")
        print(f"ratio comm.all_reduce ({a.kernel}, {a.bytes} B) / x.add_(1): {ratio:.2f} "
              "(target <= 1.5)")
        if a.out:
            world = comm.world_size
            cmd = " ".join(sys.argv) if world == 1 else \
                f"torchrun --nproc-per-node {world} " + " ".join(sys.argv)
            meta = {**bench.meta(comm, cmd), "bytes": a.bytes, "kernel": a.kernel,
                    "fast_launch": launch.FAST, "why_slow": launch.why_slow}
            write(f"{a.out}_{comm.profile.generation}_ws{world}", meta, us, ns, ratio)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
