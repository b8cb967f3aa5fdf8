"""Timing of all-reduce variants, shared by ``commrt bench``, the benchmarks and the tuner.

Graph mode: ``ops`` calls captured in one CUDA graph, replayed ``replays`` times,
CUDA events around each replay, median per op. Eager mode: bursts of back-to-back
calls between an event pair, synchronised (and, given a group, the ranks aligned by a
barrier) before each burst, median per call over bursts (host cost included, as a user
pays it). On the CPU (gloo) wall-clock time of the bursts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def busbw_factor(world: int) -> float:
    """nccl-tests' bus-bandwidth factor for all-reduce: 2(n-1)/n."""
    return 2 * (world - 1) / world


def time_eager(fn: Callable[[], None], device: torch.device, iters: int = 200,
               warmup: int = 5, group: dist.ProcessGroup | None = None,
               burst: int = 10) -> float:
    """Median µs per call of bursts of ``burst`` back-to-back calls, host included (what
    an eager loop pays: the larger of host and device time per call). Before each burst
    the device is synchronised and, given a group, the ranks meet at a barrier, so every
    burst starts from a common point; a single call timed alone swings with the ranks'
    host lag by tens of µs, a burst averages it out."""
    for _ in range(warmup):
        fn()
    samples = []
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(max(1, iters // burst)):
            torch.cuda.synchronize(device)
            if group is not None:
                dist.barrier(group)
                torch.cuda.synchronize(device)
            start.record()
            for _ in range(burst):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / burst)
    else:
        for _ in range(max(1, iters // burst)):
            if group is not None:
                dist.barrier(group)
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            samples.append((time.perf_counter() - t0) * 1e6 / burst)
    return statistics.median(samples)


def time_graph(fn: Callable[[], None], device: torch.device, ops: int = 20,
               replays: int = 10, group: dist.ProcessGroup | None = None) -> float:
    """Median µs per call of ``ops`` calls captured in one CUDA graph."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up (compile, lazy init) on the capture stream
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(ops):
            fn()
    torch.cuda.synchronize(device)
    if group is not None:
        dist.barrier(group)
    graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / ops)
    del graph
    return statistics.median(samples)


def agree_median(us: float, group: dist.ProcessGroup, device: torch.device) -> float:
    """The slowest rank's number: a collective is as fast as its last rank."""
    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())
