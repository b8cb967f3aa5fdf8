"""The copy-engine all-reduce (``commrt.copy_engine_group``) against NCCL: alone, and
beside a stream of matmuls, where what counts is how much each slows the matmuls.

    torchrun --nproc-per-node 2 benchmarks/bench_copy_engine.py

Alone: eager median µs of one all-reduce per size (bf16). Beside compute: the same
matmul loop (bf16 GEMMs of ``--gemm`` squared) timed alone and while ``--overlap-mib``
of all-reduces run on the other stream (64 MiB each); reports the loop's ms, the ms
until the all-reduces finished, and the loop's slowdown. Writes
``copy_engine_<generation>_ws<N>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

c10d = torch.ops._c10d_functional


def median_us(fn, iters: int = 30) -> float:
    """Median µs of one call timed alone (ranks meet before each)."""
    from commrt.timing import time_eager

    return time_eager(fn, torch.device("cuda", torch.cuda.current_device()), iters=iters,
                      group=dist.group.WORLD, burst=1, barrier_each=True)


def beside(matmuls, start_comm, rounds: int = 7) -> tuple[float, float]:
    """Median (matmul ms, ms until the collectives are done) with both started together."""
    mm, comm = [], []
    for _ in range(rounds):
        dist.barrier()
        torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True)
        e_mm, e_comm = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        finish = start_comm()
        matmuls()
        e_mm.record()
        finish()
        e_comm.record()
        e_comm.synchronize()
        mm.append(s.elapsed_time(e_mm))
        comm.append(s.elapsed_time(e_comm))
    return statistics.median(mm), statistics.median(comm)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemm", type=int, default=8192)
    ap.add_argument("--overlap-mib", type=int, default=1024)
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    from commrt import bench
    from commrt import copy_engine_group as ceg

    comm, dev = bench.init_torchrun()
    world = dist.get_world_size()
    groups = {"copy engine": ceg.make(dist.group.WORLD)}
    alone = {}
    for size in (256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
        x = torch.randn(size // 2, device=dev).to(torch.bfloat16)
        row = {"nccl": median_us(lambda x=x: dist.all_reduce(x))}
        for name, g in groups.items():
            row[name] = median_us(lambda x=x, g=g: c10d.wait_tensor(
                c10d.all_reduce(x, "sum", g.group_name)))
        alone[size] = row
        if comm.rank == 0:
            print(f"{size >> 10:>8} KiB  " + "  ".join(f"{k} {v:7.1f}" for k, v in row.items()),
                  flush=True)
    a = torch.randn(args.gemm, args.gemm, device=dev).to(torch.bfloat16)
    out = torch.empty_like(a)
    n_mm = 40
    bufs = [torch.randn(32 << 20, device=dev).to(torch.bfloat16)
            for _ in range(max(1, args.overlap_mib // 64))]

    def matmuls():
        for _ in range(n_mm):
            torch.mm(a, a, out=out)

    def nccl_start():
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        return lambda: [w.wait() for w in works]

    def ce_start(g):
        def start():
            outs = [c10d.all_reduce(b, "sum", g.group_name) for b in bufs]
            return lambda: [c10d.wait_tensor(o) for o in outs]
        return start

    mm_alone = median_us(matmuls, iters=7) / 1e3
    contention = {"matmuls alone": {"matmul_ms": mm_alone}}
    for name, start in [("nccl", nccl_start)] + [(k, ce_start(g)) for k, g in groups.items()]:
        comm_alone = median_us(lambda start=start: start()(), iters=7) / 1e3
        mm_ms, done_ms = beside(matmuls, start)
        contention[name] = {"comm_alone_ms": comm_alone, "matmul_ms": mm_ms,
                            "done_ms": done_ms, "matmul_slowdown": mm_ms / mm_alone}
        if comm.rank == 0:
            print(f"{name:<24} comm alone {comm_alone:7.2f} ms; beside {n_mm} GEMMs: matmuls "
                  f"{mm_ms:7.2f} ms (alone {mm_alone:.2f}, x{mm_ms / mm_alone:.3f}), "
                  f"all done {done_ms:7.2f} ms", flush=True)
    for g in groups.values():
        torch.cuda.synchronize()
        g.check_health()
    if comm.rank == 0:
        os.makedirs(args.out_dir, exist_ok=True)
        m = bench.meta(comm, f"torchrun --nproc-per-node {world} " + " ".join(sys.argv))
        path = os.path.join(args.out_dir,
                            f"copy_engine_{comm.profile.generation}_ws{world}.json")
        with open(path, "w") as f:
            json.dump({"meta": m, "alone_us": alone, "beside_matmuls": contention}, f, indent=1)
        print(f"wrote {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
