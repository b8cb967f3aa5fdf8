"""Does a same-device ``cudaMemcpyAsync`` (``dst.copy_(src)``, "Memcpy DtoD") run on the
copy engines or on SMs, and does it leave gaps in a compute stream it overlaps?

One GPU (a second one adds the peer rows). The copy-engine path of ``commrt.fx`` as an
all-gather made two local copies per gathered bucket, and rank 0's traces of the training
step showed 16-28 us compute-stream gaps lined up with them (2026-11-23). Answer, on H200: a
local copy runs on the copy engines but crawls while the SMs are full and leaves gaps as an
SM copy does; a read from the peer leaves none
(``benchmarks/results/probe_local_copy_sm90-h200.json``,
``docs/decisions/2026-11-23-overlap-same-device-copies-copy-engine.md``).

1. blocked: a kernel that fills every SM (two 32-warp programs per SM) spins for a few ms
   on one stream; a 64 MiB local copy on a high-priority stream is issued 3 ms later. A copy
   on the copy engines ends long before the spinner; one on SMs ends after it. With a
   second GPU: the same for a copy to it (push) and from it (pull).
2. gaps: a compute stream runs matmuls between small elementwise kernels, alone and with a
   high-priority stream looping 64 MiB local copies (``copy_``), the same copies made by
   an SM kernel, or copies to / from a second GPU where there is one; a ``torch.profiler`` trace
   gives the compute stream's idle time and busy time.

    python benchmarks/probes/probe_local_copy.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile


@triton.jit(do_not_specialize=["iters"])
def _spin(x_ptr, iters):
    acc = tl.load(x_ptr + tl.arange(0, 1024) * 0).to(tl.float32)
    for _ in range(iters):
        acc = acc * 1.0000001 + 1e-7
    tl.store(x_ptr + tl.program_id(0) * 0 + tl.arange(0, 1024) * 0, acc, mask=acc < -1.0)


def blocked(nbytes: int, iters: int) -> dict:
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    src = torch.randn(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    x = torch.zeros(1024, device=dev)
    hi = torch.cuda.Stream(priority=-1)
    lo = torch.cuda.Stream()
    _spin[(1,)](x, 1, num_warps=32)  # compile before timing
    hows = ["copy_", "sm_kernel", "alone"]
    if torch.cuda.device_count() > 1:
        other = torch.empty_like(src, device=torch.device("cuda", 1))
        other.copy_(src)
        hows += ["peer_push", "peer_pull"]
    out = {}
    for how in hows:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        torch.cuda.synchronize()
        with torch.cuda.stream(lo):
            ev[0].record()
            if how != "alone":
                _spin[(2 * sms,)](x, iters, num_warps=32)
            ev[1].record()
        time.sleep(0.003)  # the spinner is resident (no SM kernel may delay the copy)
        with torch.cuda.stream(hi):
            ev[2].record()
            if how == "sm_kernel":
                torch.add(src, 0.0, out=dst)
            elif how == "peer_push":
                other.copy_(src)
            elif how == "peer_pull":
                dst.copy_(other)
            else:
                dst.copy_(src)
            ev[3].record()
        torch.cuda.synchronize()
        if how.startswith("peer"):
            torch.cuda.synchronize(1)
        out[how] = {"spin_ms": ev[0].elapsed_time(ev[1]),
                    "copy_start_ms": ev[0].elapsed_time(ev[2]),
                    "copy_end_ms": ev[0].elapsed_time(ev[3]),
                    "copy_ms": ev[2].elapsed_time(ev[3])}
        assert torch.equal((other if how == "peer_push" else dst).cpu(), src.cpu())
    return out


def gaps(nbytes: int, steps: int, side: str) -> dict:
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    e = torch.randn(8 << 20, device=dev)
    src = torch.randn(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    peer = None
    if side.startswith("peer"):
        peer = torch.empty_like(src, device=torch.device("cuda", 1))
        peer.copy_(src)
    hi = torch.cuda.Stream(priority=-1)
    main = torch.cuda.current_stream()

    def compute():
        for _ in range(steps):
            c = a @ b
            e.mul_(1.0001)
            c.relu_()
        return c

    for _ in range(2):  # warm up
        compute()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        if side != "none":
            with torch.cuda.stream(hi):
                hi.wait_stream(main)
                for _ in range(steps // 2):
                    if side == "copy_":
                        dst.copy_(src)
                    elif side == "sm_kernel":
                        torch.add(src, 0.0, out=dst)
                    elif side == "peer_push":
                        peer.copy_(src)
                    else:
                        dst.copy_(peer)
                    torch.cuda._sleep(20_000)
        compute()
        if side != "none":
            main.wait_stream(hi)
        end.record()
        torch.cuda.synchronize()
    wall = start.elapsed_time(end)
    kernels = [ev for ev in prof.events()
               if ev.device_type == torch.autograd.DeviceType.CUDA]
    # the compute stream: the one the matmuls ran on
    by_stream: dict[int, list] = {}
    for ev in kernels:
        sid = getattr(ev, "device_resource_id", None)
        by_stream.setdefault(sid, []).append(ev)
    comp = max(by_stream.values(),
               key=lambda evs: sum("gemm" in ev.name.lower() or "cutlass" in ev.name.lower()
                                   or "nvjet" in ev.name.lower() for ev in evs))
    spans = sorted((ev.time_range.start, ev.time_range.end) for ev in comp)
    busy = sum(e1 - s1 for s1, e1 in spans) / 1e3
    gaps_us = [s2 - e1 for (_, e1), (s2, _) in zip(spans[:-1], spans[1:], strict=True)
                  if s2 > e1]
    mm = [ev.time_range.end - ev.time_range.start for ev in comp
          if ev.time_range.end - ev.time_range.start > 50]
    side_names = sorted({ev.name for evs in by_stream.values() if evs is not comp
                         for ev in evs})
    return {"wall_ms": wall, "compute_busy_ms": busy,
            "compute_idle_ms": sum(gaps_us) / 1e3,
            "gaps_over_5us": sum(g > 5 for g in gaps_us),
            "max_gap_us": max(gaps_us, default=0.0),
            "matmul_median_us": statistics.median(mm) if mm else None,
            "side_kernels": side_names[:8]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    nbytes = args.mib << 20
    res = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", *sys.argv]),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "mib": args.mib,
           "blocked": blocked(nbytes, 2_000_000)}
    print(json.dumps(res["blocked"], indent=1), flush=True)
    sides = ["none", "copy_", "sm_kernel"]
    if torch.cuda.device_count() > 1:
        sides += ["peer_push", "peer_pull"]
    res["gaps"] = {}
    for side in sides:
        res["gaps"][side] = gaps(nbytes, 200, side)
        print(side, json.dumps(res["gaps"][side]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
