"""The third step of ``overlap_and_bucket``: where a wait would stall the compute stream
(its collective still in flight in the simulated timeline), run the work that does not
need it first.

Typical case: a training step whose optimizer updates come in parameter order after the
backward. The first update needs the first layer's gradients, whose all-reduce is the last
one issued; waiting for it there leaves every other update, which could hide it, behind.

A list schedule over the placed graph: of the nodes whose inputs are done, the earliest in
graph order runs, and a wait counts as done only once its collective is predicted to end;
only when nothing else can run does the clock jump to the earliest such end. Without a
stall it returns the graph's order unchanged. Nodes with side effects (mutations, other
impure ops) keep their place relative to every other node; collectives of one group keep
their order; the result is a function of the graph and the tables, the same on every rank.
"""

from __future__ import annotations

import heapq

import torch
import torch.fx as fx

c10d = torch.ops._c10d_functional


def _barrier(n: fx.Node, starts: set) -> bool:
    """A node nothing may cross: impure, other than the collectives this pass moves."""
    if n.op in ("placeholder", "output"):
        return True
    if n.op != "call_function" or n in starts or n.target == c10d.wait_tensor.default:
        return False
    try:
        return n.is_impure()
    except Exception:
        return True


def defer_stalls(graph: fx.Graph, colls: list, model) -> tuple[list, int]:
    """(new order, waits moved later); see the module docstring. Does not edit the graph."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    by_start = {c.start: c for c in colls}
    by_end = {c.end: c for c in colls if c.end is not c.start}
    succ: dict[fx.Node, list] = {n: [u for u in n.users if u in pos] for n in order}
    indeg = {n: len([a for a in n.all_input_nodes if a in pos]) for n in order}

    def after(a: fx.Node, b: fx.Node) -> None:  # b must come after a
        succ[a].append(b)
        indeg[b] += 1

    starts = set(by_start)
    last_barrier, since = None, []
    for n in order:  # segments between barriers; collectives of a group in order
        if _barrier(n, starts):
            for m in since:
                after(m, n)
            if last_barrier is not None and not since:
                after(last_barrier, n)
            last_barrier, since = n, []
        else:
            if last_barrier is not None:
                after(last_barrier, n)
            since.append(n)
    prev_start: dict[str, fx.Node] = {}
    for n in order:
        c = by_start.get(n)
        if c is not None:
            if c.group in prev_start:
                after(prev_start[c.group], n)
            prev_start[c.group] = n

    clock, comm_free, done = 0.0, {}, {}
    ready = [(pos[n], n) for n in order if indeg[n] == 0]
    heapq.heapify(ready)
    pending: list = []  # (predicted end, pos, wait)
    out: list[fx.Node] = []

    def release(m: fx.Node) -> None:
        c = by_end.get(m)
        if c is not None and done[id(c)] > clock:
            heapq.heappush(pending, (done[id(c)], pos[m], m))
        else:
            heapq.heappush(ready, (pos[m], m))

    while ready or pending:
        while pending and pending[0][0] <= clock:
            heapq.heappush(ready, pending[0][1:])
            heapq.heappop(pending)
        if ready:
            _, n = heapq.heappop(ready)
        else:  # every runnable node waits for a collective: the stream stalls
            t, _, n = heapq.heappop(pending)
            clock = t
        out.append(n)
        c = by_start.get(n)
        if c is not None:
            us = model.comm_us(c.kind, c.nbytes, c.key[3], c.group)
            if c.end is c.start:  # commrt::all_reduce runs on the compute stream
                clock += us
            else:
                begin = max(clock, comm_free.get(c.group, 0.0))
                comm_free[c.group] = done[id(c)] = begin + us
        elif n not in by_end:
            clock += model.compute_us(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                release(m)
    if len(out) != len(order):  # a cycle cannot happen in a valid graph; keep it as it was
        return order, 0
    new_pos = {n: i for i, n in enumerate(out)}
    moved = sum(1 for c in by_end.values()
                if new_pos[c.end] - new_pos[c.start] > pos[c.end] - pos[c.start])
    return out, moved


def relink(graph: fx.Graph, order: list) -> None:
    """Put the graph's nodes in ``order`` (a topological order of the same nodes)."""
    prev = None
    for n in order:
        if prev is not None and n.prev is not prev:
            prev.append(n)
        prev = n
