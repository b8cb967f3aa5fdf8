"""Where the partitioned scatter spends its time, per contention level (one GPU).

    python benchmarks/scatter_sweep.py [--out-dir benchmarks/results]

For the anchor's shape (values [1,000,000 x 100] fp32, output [501 x 100]) and indices
drawn from 0..k: the scatter kernel alone at every forced partition count and launch
config, the prepare and sum kernels alone, the whole op, and one compiled index_add
with and without Inductor's partitioned scatter, all as median ms of
``triton.testing.do_bench``. This is what the partition rule and launch config of
``commrt.fx.scatter_kernels`` are read from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch
import triton

from commrt.fx import scatter_kernels as sk

KS = (0, 3, 31, 63, 127, 500)
PS = (1, 2, 4, 8, 16, 32, 64, 128)
CONFIGS = ((512, 4), (1024, 4), (2048, 4), (1024, 8), (2048, 8), (4096, 8))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    import torch._inductor.config as ic

    dev = torch.device("cuda")
    n, d, rows, big_p = 1_000_000, 100, 501, 128
    g = torch.Generator(device=dev).manual_seed(0)
    vals = torch.randn(n, d, device=dev, generator=g)
    base = torch.zeros(rows, d, device=dev)
    plane = rows * d
    copies = torch.zeros(big_p * plane, device=dev)
    state = torch.zeros(2, device=dev, dtype=torch.int32)

    def index_add(o, i, v):
        return o.index_add(0, i, v)
    compiled = {}
    for name, part in (("compiled", False), ("inductor partitioned", True)):
        torch._dynamo.reset()
        with ic.patch({"fx_graph_cache": False, "partitioned_scatter_enabled": part}):
            fn = torch.compile(index_add)
            fn(base, torch.zeros(n, device=dev, dtype=torch.long), vals)
        compiled[name] = fn
    out = {}
    for k in KS:
        idx = torch.randint(0, k + 1, (n,), device=dev, generator=g)
        row = {"scatter": {}, "op": bench(lambda idx=idx: sk.partitioned_index_add(
            base, idx, vals, big_p))}
        for name, fn in compiled.items():
            row[name] = bench(lambda fn=fn, idx=idx: fn(base, idx, vals))
        for p in PS:
            state[0], state[1] = p, 0
            for block, warps in CONFIGS:
                row["scatter"][f"p{p} b{block} w{warps}"] = bench(
                    lambda block=block, warps=warps, idx=idx: sk._scatter[
                        (triton.cdiv(n * d, block),)](copies, idx, vals, state[0:1], state[1:2],
                                                      n * d, rows, D=d, BLOCK=block,
                                                      WIDE=False, num_warps=warps))
        for p in (4, 128):
            state[0] = p
            row[f"sum p{p}"] = bench(lambda: sk._sum[(triton.cdiv(plane, 256),)](
                copies, base, state[0:1], state[1:2], plane, BLOCK=256, CP=16))
        row["prepare"] = bench(lambda idx=idx: sk._prepare[(264,)](
            base, copies, idx, state[0:1], state[1:2], n, rows, d, P=big_p, SAMPLE=sk.SAMPLE,
            PER_ADDRESS=sk.PER_ADDRESS, BLOCK=4096, TILE=64))
        row["chosen_p"] = int(state[0])
        best = min(row["scatter"], key=row["scatter"].get)
        by_p = {p: min(v for c, v in row["scatter"].items() if c.startswith(f"p{p} "))
                for p in PS}
        print(f"k={k:>3} op {row['op']:.3f} (p={row['chosen_p']})  compiled "
              f"{row['compiled']:.3f}  inductor part {row['inductor partitioned']:.3f}  "
              f"prepare {row['prepare']:.3f}  sum4 {row['sum p4']:.3f} sum128 "
              f"{row['sum p128']:.3f}  best scatter {best} {row['scatter'][best]:.3f}  by p "
              + " ".join(f"{p}:{v:.3f}" for p, v in by_p.items()), flush=True)
        out[k] = row
    os.makedirs(args.out_dir, exist_ok=True)
    name = torch.cuda.get_device_name().replace(" ", "_")
    path = os.path.join(args.out_dir, f"scatter_sweep_{name}.json")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv)}
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": out}, f, indent=1)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
