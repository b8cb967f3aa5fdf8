"""Timing of all-reduce variants, shared by ``commrt bench``, the benchmarks and the tuner.

Graph mode: ``ops`` calls captured in one CUDA graph, the replays queued back to back
with an event between two, median per op. Eager mode: the calls back to back, an event
after every ``burst`` of them, median per call over bursts (host cost included, as a user
pays it). The ranks meet once before the timed calls, and the first replay or burst, in
which they fall into step, is not counted. On the CPU (gloo) wall-clock time of bursts.
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
               burst: int = 10, barrier_each: bool = False) -> float:
    """Median µs per call over segments of ``burst`` back-to-back calls, host included
    (what an eager loop pays: the larger of host and device time per call).

    The ranks meet once, then run ``iters`` calls (plus one segment, not counted, in
    which they fall into step) without stopping, an event between segments, so that a
    rank's lag at the start is paid once, not once per segment (until session 12 the
    ranks met before every burst of 10 calls, and two columns timing the same host-bound
    call differed by up to 5%). ``barrier_each`` synchronises and meets before every segment
    instead: the latency of a call started together, timed alone with ``burst=1``."""
    for _ in range(warmup):
        fn()
    segments = max(1, iters // burst)
    if device.type != "cuda":
        if group is not None:
            dist.barrier(group)
        marks = []
        for _ in range(segments + 1):
            marks.append(time.perf_counter())
            for _ in range(burst):
                fn()
        marks.append(time.perf_counter())
        return statistics.median((marks[i + 1] - marks[i]) * 1e6 / burst
                                 for i in range(1, segments + 1))
    if barrier_each:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(segments):
            _meet(device, group)
            start.record()
            for _ in range(burst):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / burst)
        return statistics.median(samples)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(segments + 2)]
    _meet(device, group)
    events[0].record()
    for i in range(1, segments + 2):
        for _ in range(burst):
            fn()
        events[i].record()
    events[-1].synchronize()
    return statistics.median(events[i].elapsed_time(events[i + 1]) * 1e3 / burst
                             for i in range(1, segments + 1))


def _meet(device: torch.device, group: dist.ProcessGroup | None) -> None:
    """Device idle and, given a group, the ranks past a barrier."""
    torch.cuda.synchronize(device)
    if group is not None:
        dist.barrier(group)
        torch.cuda.synchronize(device)


def time_graph(fn: Callable[[], None], device: torch.device, ops: int = 20,
               replays: int = 10, group: dist.ProcessGroup | None = None) -> float:
    """Median µs per call of ``ops`` calls captured in one CUDA graph, the replays queued
    back to back with an event between two (the first, in which the ranks fall into
    step, not counted)."""
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
    _meet(device, group)
    graph.replay()  # the first replay uploads the graph
    events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 2)]
    _meet(device, group)
    events[0].record()
    for i in range(1, replays + 2):
        graph.replay()
        events[i].record()
    events[-1].synchronize()
    del graph
    return statistics.median(events[i].elapsed_time(events[i + 1]) * 1e3 / ops
                             for i in range(1, replays + 1))


def agree_median(us: float, group: dist.ProcessGroup, device: torch.device) -> float:
    """The slowest rank's number: a collective is as fast as its last rank."""
    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())
