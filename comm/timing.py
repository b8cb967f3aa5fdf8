"""Timing of all-reduce variants, shared by ``commrt bench``, the benchmarks and the tuner.

Graph mode: ``ops`` calls captured in one CUDA graph, replayed ``replays`` times,
CUDA events around each replay, median per op. Eager mode: bursts of back-to-back
calls between an event pair, synchronised (and, given a group, the ranks aligned by a
barrier) before each burst, median per call over bursts (host cost included, as a user
pays it); calls compared with each other are timed in interleaved bursts. On the CPU
(gloo) wall-clock time of the bursts.
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
    return time_eager_each([fn], device, iters, warmup, group, burst)[0]


def time_eager_each(fns: list[Callable[[], None]], device: torch.device, iters: int = 200,
                    warmup: int = 5, group: dist.ProcessGroup | None = None,
                    burst: int = 10) -> list[float]:
    """``time_eager`` of each of ``fns``, their bursts interleaved (one burst of each in
    turn, the turn's order rotating), so that a slow phase of the host falls on all of
    them alike: two columns of one call then differ by the host's noise within seconds,
    not by the phase each one happened to fall in."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    cuda = device.type == "cuda"
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for k in range(max(1, iters // burst)):
        for j in range(len(fns)):
            i = (j + k) % len(fns)
            if cuda:
                torch.cuda.synchronize(device)
            if group is not None:
                dist.barrier(group)
                if cuda:
                    torch.cuda.synchronize(device)
            if cuda:
                start.record()
            t0 = time.perf_counter()
            for _ in range(burst):
                fns[i]()
            if cuda:
                end.record()
                end.synchronize()
                samples[i].append(start.elapsed_time(end) * 1e3 / burst)
            else:
                samples[i].append((time.perf_counter() - t0) * 1e6 / burst)
    return [statistics.median(s) for s in samples]


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
    return agree_max([us], group, device)[0]


def agree_max(us: list[float], group: dist.ProcessGroup, device: torch.device) -> list[float]:
    """Each of ``us``, the slowest rank's (one collective)."""
    t = torch.tensor(us, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()
