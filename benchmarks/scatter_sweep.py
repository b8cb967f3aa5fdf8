"""Where the partitioned scatter spends its time, per contention level (one GPU).

    python benchmarks/scatter_sweep.py [--out-dir benchmarks/results]

For the anchor's shape (values [1,000,000 x 100] fp32, output [501 x 100]) and indices
drawn from 0..k: the scatter kernel alone at every forced partition count, rows per
program and warps, adding every row ("plain"), summing rows that share an index first
("combined"), or that where at most LEADERS are distinct ("shipped"); the prepare
and sum kernels alone; the whole op as shipped, with the partition count it picked and
its kernels' times from the profiler. Median ms of ``triton.testing.do_bench``. The
constants of ``commrt.fx.scatter`` are read from this.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys

import torch
import triton
import triton.language as tl

from commrt.fx import scatter_kernels as sk
from commrt.fx import scatter_rule as sc

KS = (0, 3, 15, 31, 63, 127, 500)
PS = (1, 4, 16, 32, 64, 128)
RS = (16, 32)
WARPS = (2, 4, 8)


@triton.jit
def _read_rows(vals, out, n, D: tl.constexpr, R: tl.constexpr, BD: tl.constexpr):
    # the scatter's loads with no atomics: what reading the values costs
    r = tl.program_id(0) * R + tl.arange(0, R)
    c = tl.arange(0, BD)
    v = tl.load(vals + r[:, None] * D + c[None, :], mask=(r[:, None] < n) & (c[None, :] < D),
                other=0)
    tl.store(out + tl.program_id(0) + tl.arange(0, 1), tl.sum(tl.sum(v, axis=1), axis=0)[None])


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


def profile(fn) -> dict[str, float]:
    """Mean GPU ms per call of every kernel ``fn`` launches."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    fn()
    torch.cuda.synchronize()
    reps = 20
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in p.key_averages():
        if e.device_type.name == "CUDA" and e.count:
            out[e.key[:40]] = e.device_time_total / 1e3 / reps
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    dev = torch.device("cuda")
    n, d, rows, big_p = 1_000_000, 100, 501, 128
    g = torch.Generator(device=dev).manual_seed(0)
    vals = torch.randn(n, d, device=dev, generator=g)
    base = torch.zeros(rows, d, device=dev)
    plane = rows * d
    copies = torch.zeros(big_p * plane, device=dev)
    acc, extra = copies[:plane], copies[plane:]  # copy 0, the others
    state = torch.zeros(3, device=dev, dtype=torch.int32)  # p, error, may combine
    scratch = torch.empty_like(base)  # what the timed sum kernels write
    sink = torch.empty(n, device=dev)  # what the read-floor kernel writes
    out = {}
    for k in KS:
        idx = torch.randint(0, k + 1, (n,), device=dev, generator=g)
        ref = base.double().index_add(0, idx, vals.double())
        got = sk.partitioned_index_add(base, idx, vals, big_p)
        err = float((got.double() - ref).norm() / ref.norm())
        assert err < 1e-5, (k, err)
        row = {"op": bench(lambda idx=idx: sk.partitioned_index_add(base, idx, vals, big_p)),
               "op kernels": profile(lambda idx=idx: sk.partitioned_index_add(
                   base, idx, vals, big_p)), "op max rel err": err, "scatter": {}}
        for r, warps in itertools.product(RS, WARPS):
            for mode, leaders in (("plain", -1), ("combined", r), ("shipped", sc.LEADERS)):
                cfg = dict(sk.scatter_config(d, vals.dtype), R=r, LEADERS=leaders)
                name = f"r{r} w{warps}"

                def run(cfg=cfg, warps=warps, idx=idx):
                    sk._scatter[(triton.cdiv(n, cfg["R"]),)](
                        acc, extra, idx, vals, state, n, rows, WIDE=False,
                        num_warps=warps, **cfg)
                copies.zero_()
                state[0], state[1], state[2] = 16, 0, 1
                run()
                e = float((copies.view(big_p, rows, d)[:16].sum(0).double()
                           - ref).norm() / ref.norm())
                if e > 1e-5:  # recorded, not timed
                    row.setdefault("wrong", {})[f"{mode} {name}"] = e
                    print(f"k={k} {mode} {name}: WRONG, rel err {e:.2e}", flush=True)
                    continue
                for p in PS:
                    state[0], state[1], state[2] = p, 0, 1
                    row["scatter"][f"{mode} p{p} {name}"] = bench(run)
        for p in (16, 128):
            state[0] = p
            for block in (64, 128, 256):
                row[f"sum p{p} b{block}"] = bench(lambda block=block: sk._sum[
                    (min(triton.cdiv(plane, block), sk.SUM_PROGRAMS),)](
                        acc, extra, scratch, state, plane, SAME=False, BLOCK=block, CP=16))
        if k == 0:  # reading the values, with no atomics: the floor
            row["read floor"] = {f"r{r} w{w}": bench(lambda r=r, w=w: _read_rows[
                (triton.cdiv(n, r),)](vals, sink, n, D=d, R=r, BD=128, num_warps=w))
                for r in (16, 32, 64) for w in (2, 4, 8)}
            row["read floor"]["torch sum"] = bench(lambda: vals.sum(0))
            print("   read floor " + " ".join(f"{c} {v:.3f}" for c, v in
                                             row["read floor"].items()), flush=True)
        row["prepare"] = bench(lambda idx=idx: sk._prepare[(264,)](
            base, acc, extra, idx, state, n, rows, plane, P=big_p, SAMPLE=sc.SAMPLE,
            SHIFTS=sc.SHIFTS, PER_ADDRESS=sc.PER_ADDRESS, MIN_COPIES=sc.MIN_COPIES, R=sc.BLOCK_ROWS,
            LEADERS=sc.LEADERS, BLOCK=4096))
        row["chosen_p"] = int(state[0])
        best = min(row["scatter"], key=row["scatter"].get)
        by_mode_p = {f"{m[0]}{p}": min(v for c, v in row["scatter"].items()
                                       if c.startswith(f"{m} p{p} "))
                     for m in ("plain", "combined", "shipped") for p in PS}
        print(f"k={k:>3} op {row['op']:.3f} (p={row['chosen_p']})  prepare "
              f"{row['prepare']:.3f}  best scatter {best} {row['scatter'][best]:.3f}  "
              + " ".join(f"{c}:{v:.3f}" for c, v in by_mode_p.items()), flush=True)
        print("   op kernels " + "  ".join(f"{c} {v:.3f}" for c, v in row["op kernels"].items())
              + "  sums " + " ".join(f"{c} {v:.3f}" for c, v in row.items()
                                     if c.startswith("sum")), flush=True)
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
