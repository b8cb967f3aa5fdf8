"""All-reduce benchmark: every variant side by side, checked against a float64 sum, then timed.

    torchrun --nproc-per-node 2 benchmarks/bench_allreduce.py [--out-dir benchmarks/results]

Per size (4 KB to 256 MB by default): NCCL, PyTorch's symm-mem ops in place on their
symmetric buffer, each of commrt's kernels on an ordinary tensor and on a ``comm.empty``
tensor, and ``auto``; CUDA-graph mode (20 ops a graph, 10 replays) and eager mode (20
bursts of 10 back-to-back calls), every variant timed in ``--rounds`` rounds on fresh
inputs (``commrt.bench.run_bench``): graph mode a size's rounds back to back, the median
over rounds; eager mode rounds over all sizes, the fastest round (host-bound timings only
get slower from interference).
Writes ``allreduce_<device>_ws<N>.json`` and ``.md`` with device, versions, date and
command.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", default="4KiB")
    p.add_argument("--max-bytes", default="256MiB")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--modes", default="graph,eager")
    p.add_argument("--out-dir", default="benchmarks/results")
    p.add_argument("--tag", default="", help="suffix for the result file names")
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds per variant and size (graph: median, eager: fastest)")
    p.add_argument("--pairs", type=int, default=100,
                   help="alternating bursts of auto and the fastest other variant per size")
    args = p.parse_args()

    from commrt import bench
    from commrt.config import parse_bytes

    comm, _ = bench.init_torchrun()
    sizes = bench.sizes_between(parse_bytes(args.min_bytes), parse_bytes(args.max_bytes))
    modes = args.modes.split(",")
    show = bench.progress_printer(comm.rank, len(sizes) * len(modes) * args.rounds)
    rows = bench.run_bench(comm, sizes, bench.DTYPES[args.dtype], modes,
                           bench.standard_variants(comm), show, rounds=args.rounds,
                           pairs=args.pairs)
    if comm.rank == 0:
        print(bench.format_table(rows, comm.world_size), flush=True)
        device = comm.profile.generation.replace("/", "-")
        name = f"allreduce_{device}_ws{comm.world_size}{args.tag}.json"
        os.makedirs(args.out_dir, exist_ok=True)
        cmd = f"torchrun --nproc-per-node {comm.world_size} " + " ".join(sys.argv)
        bench.write_results(os.path.join(args.out_dir, name), bench.meta(comm, cmd), rows)
        print(f"wrote {os.path.join(args.out_dir, name)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
