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

from .cost import Timeline

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


def _dependencies(order: list, starts: set, group_of: dict) -> tuple[dict, dict]:
    """(successors, in-degrees) of ``order``: data edges, nothing crossing a barrier, and
    the starts of one group (``group_of``: start -> group) in their order."""
    pos = {n: i for i, n in enumerate(order)}
    succ: dict[fx.Node, list] = {n: [u for u in n.users if u in pos] for n in order}
    indeg = {n: len([a for a in n.all_input_nodes if a in pos]) for n in order}

    def after(a: fx.Node, b: fx.Node) -> None:  # b must come after a
        succ[a].append(b)
        indeg[b] += 1

    last_barrier, since = None, []
    for n in order:  # segments between barriers
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
        if n in group_of:
            if group_of[n] in prev_start:
                after(prev_start[group_of[n]], n)
            prev_start[group_of[n]] = n
    return succ, indeg


def defer_stalls(graph: fx.Graph, colls: list, model) -> tuple[list, int]:
    """(new order, waits moved later); see the module docstring. Does not edit the graph."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    by_start = {c.start: c for c in colls}
    by_end = {c.end: c for c in colls if c.end is not c.start}
    succ, indeg = _dependencies(order, set(by_start), {c.start: c.group for c in colls})

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
            if c.end is c.start:  # commrt's ops run on the compute stream
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


def plan_dependencies(order: list, colls: list) -> tuple[dict, dict]:
    """What ``simulate_plan`` needs of ``order`` whatever the plan (computed once)."""
    return _dependencies(order, {c.start for c in colls}, {})


def simulate_plan(order: list, buckets: list, model, priority: dict,
                  deps: tuple[dict, dict]) -> tuple[float, float]:
    """(predicted end of the step in µs, exposed µs) if the collectives of ``order`` (one
    graph, before bucketing) ran as ``buckets``: each a ``Bucket`` (``cost``) issued once
    its last member's input exists, packed (``cat_us``) on the compute stream, waited on
    by its members. The same list schedule as ``defer_stalls`` (``priority``: node -> its
    place once its collective is moved) on the clocks of ``cost.Timeline``. A plan whose
    members wait on each other's buckets ends at infinity. ``deps``: from
    ``plan_dependencies``."""
    of = {m.start: b for b in buckets for m in b.members}
    ends = {m.end: b for b in buckets for m in b.members if m.end is not m.start}
    succ, indeg = deps[0], dict(deps[1])
    pos = {n: i for i, n in enumerate(order)}
    left = {id(b): len(b.members) for b in buckets}
    held: dict[int, list] = {}  # bucket -> members popped before it was issued
    done: dict[int, float] = {}
    tl = Timeline(model.host_us)
    ready = [(priority.get(n, i), i, n) for i, n in enumerate(order) if indeg[n] == 0]
    heapq.heapify(ready)
    pending: list = []
    emitted = 0

    def release(m: fx.Node) -> None:
        b = ends.get(m)
        item = (priority.get(m, pos[m]), pos[m], m)
        if b is not None and done[id(b)] > tl.clock:
            heapq.heappush(pending, (done[id(b)], *item))
        else:
            heapq.heappush(ready, item)

    def finish(n: fx.Node) -> None:
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                release(m)

    while ready or pending:
        while pending and pending[0][0] <= tl.clock:
            heapq.heappush(ready, heapq.heappop(pending)[1:])
        if ready:
            n = heapq.heappop(ready)[2]
        else:
            t, *_, n = heapq.heappop(pending)
            tl.wait(t)
        emitted += 1
        b = of.get(n)
        if b is None:
            if n not in ends:
                tl.compute(model.compute_us(n))
            finish(n)
            continue
        held.setdefault(id(b), []).append(n)
        left[id(b)] -= 1
        if left[id(b)] == 0:
            tl.compute(b.cat_us)
            done[id(b)] = tl.issue(b.stream, b.us, b.contention, b.sync)
            for m in held.pop(id(b)):
                finish(m)
    if emitted != len(order):
        return float("inf"), float("inf")
    return max([tl.clock, *done.values()]), tl.exposed
