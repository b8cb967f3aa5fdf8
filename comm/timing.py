"""Timing of collective variants, shared by ``commrt bench``, the benchmarks and the tuner.

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


def busbw_factor(world: int, op: str = "all_reduce") -> float:
    """nccl-tests' bus-bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather
    and reduce-scatter (of the whole message: the gathered output, the scattered input)."""
    return (2 if op == "all_reduce" else 1) * (world - 1) / world


def time_eager(fn: Callable[[], None], device: torch.device, iters: int = 200,
               warmup: int = 5, group: dist.ProcessGroup | None = None,
               burst: int = 10, barrier_each: bool = False) -> float:
    """Median µs per call over segments of ``burst`` back-to-back calls, host included
    (what an eager loop pays: the larger of host and device time per call).

    The ranks meet once, then run ``iters`` calls (plus one segment, not counted, in
    which they fall into step) without stopping, an event between segments, so that a
    rank's lag at the start is paid once, not once per segment. Two such measurements of
    one host-bound call still differ by up to 8% on 2 x H200 (the host's pace drifts);
    ``time_pair`` compares two calls side by side. ``barrier_each`` synchronises and meets
    before every segment instead: the latency of a call started together, timed alone
    with ``burst=1``."""
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


def _capture(fn: Callable[[], None], device: torch.device, ops: int) -> torch.cuda.CUDAGraph:
    """``ops`` calls of ``fn`` captured in one CUDA graph (after a warm-up on the side
    stream that captures them)."""
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
    return graph


def time_graph(fn: Callable[[], None], device: torch.device, ops: int = 20,
               replays: int = 10, group: dist.ProcessGroup | None = None) -> float:
    """Median µs per call of ``ops`` calls captured in one CUDA graph, the replays queued
    back to back with an event between two (the first, in which the ranks fall into
    step, not counted)."""
    return time_graphs(fn, device, ops, replays, 1, group)[0]


def time_graphs(fn: Callable[[], None], device: torch.device, ops: int = 20,
                replays: int = 10, graphs: int = 1,
                group: dist.ProcessGroup | None = None) -> list[float]:
    """``time_graph`` of ``graphs`` graphs of the same calls, captured one after the other
    and all kept alive (each allocates its tensors apart from the others'), then replayed
    in turn, back to back: median µs per call of each graph. The graphs differ only in
    where their tensors lie."""
    captured = [_capture(fn, device, ops) for _ in range(graphs)]
    _meet(device, group)
    for graph in captured:
        graph.replay()  # the first replay uploads the graph
    events = [torch.cuda.Event(enable_timing=True) for _ in range(graphs * (replays + 1) + 1)]
    _meet(device, group)
    events[0].record()
    for i in range(graphs * (replays + 1)):
        captured[i % graphs].replay()
        events[i + 1].record()
    events[-1].synchronize()
    del captured
    return [statistics.median(events[i].elapsed_time(events[i + 1]) * 1e3 / ops
                              for i in range(graphs + g, graphs * (replays + 1), graphs))
            for g in range(graphs)]


def time_pair(fa: Callable[[], None], fb: Callable[[], None], device: torch.device,
              mode: str, burst: int = 20, pairs: int = 30,
              group: dist.ProcessGroup | None = None) -> float:
    """Median over ``pairs`` of (time of ``burst`` calls of ``fa``) / (the same of ``fb``),
    timed in alternating bursts, which of the two goes first alternating too: a drift of
    the host or the device that outlasts two bursts falls on both.

    Graph mode: a graph of ``burst`` calls each, replayed in turn back to back. Eager
    mode: the device idles before each burst (a device-bound burst would otherwise leave
    a queue that the next burst's first calls skip), and the ranks, having finished the
    same collectives, leave that synchronisation together. This rank's median: agree
    across ranks with ``agree_median``."""
    order = [(0, 1) if p % 2 == 0 else (1, 0) for p in range(pairs)]
    fns = (fa, fb)
    if device.type != "cuda":  # gloo: wall clock, eager only
        if group is not None:
            dist.barrier(group)
        secs = [[0.0, 0.0] for _ in range(pairs)]
        for p, turn in enumerate(order):
            for which in turn:
                t0 = time.perf_counter()
                for _ in range(burst):
                    fns[which]()
                secs[p][which] = time.perf_counter() - t0
        return statistics.median(a / b for a, b in secs)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(2)] for _ in range(pairs)]
    if mode == "graph":
        graphs = [_capture(f, device, burst) for f in fns]
        _meet(device, group)
        for g in graphs:  # the first replay uploads the graph
            g.replay()
        _meet(device, group)
        for p, turn in enumerate(order):
            for which in turn:
                events[p][which][0].record()
                graphs[which].replay()
                events[p][which][1].record()
    else:
        for _ in range(3):
            fa()
            fb()
        _meet(device, group)
        for p, turn in enumerate(order):
            for which in turn:
                torch.cuda.synchronize(device)
                events[p][which][0].record()
                for _ in range(burst):
                    fns[which]()
                events[p][which][1].record()
    torch.cuda.synchronize(device)
    return statistics.median(ea[0].elapsed_time(ea[1]) / eb[0].elapsed_time(eb[1])
                             for ea, eb in events)


def agree_median(us: float, group: dist.ProcessGroup, device: torch.device) -> float:
    """The slowest rank's number: a collective is as fast as its last rank."""
    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())
