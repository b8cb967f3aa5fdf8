"""Host cost of one eager all-reduce call, per path (the Python dispatch budget).

    torchrun --nproc-per-node 2 benchmarks/bench_host_overhead.py

Times ``calls`` back-to-back calls on the host only (the GPU queue absorbs them), for
dist.all_reduce, PyTorch's two_shot op, commrt's auto path and each forced algorithm;
then prints a cProfile of the auto path, heaviest first.
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch
import torch.distributed as dist


def host_us(fn, calls: int = 300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    dist.barrier()
    return t


def main() -> None:
    import commrt
    from commrt import bench

    comm, _ = bench.init_torchrun()
    x = torch.randn(8192, device="cuda").to(torch.bfloat16)
    w = comm.empty(8192, torch.bfloat16)
    w.copy_(x)
    paths = {
        "dist.all_reduce": lambda: dist.all_reduce(x),
        "torch two_shot_all_reduce_ (symm buffer)":
            lambda: torch.ops.symm_mem.two_shot_all_reduce_(w, "sum", comm.group_name),
        "commrt.all_reduce (auto)": lambda: commrt.all_reduce(x),
        "comm.all_reduce (auto)": lambda: comm.all_reduce(x),
    }
    for algo in ("one_shot_push", "one_shot", "two_shot"):
        paths[f"comm.run_algorithm({algo})"] = lambda a=algo: comm.run_algorithm(a, x)
    for name, fn in paths.items():
        us = host_us(fn)
        if comm.rank == 0:
            print(f"{name:<45} {us:8.2f} µs host per call", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        comm.all_reduce(x)
    prof.disable()
    torch.cuda.synchronize()
    if comm.rank == 0:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
