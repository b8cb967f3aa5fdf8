"""The first step of ``overlap_and_bucket``: compute a collective's input as soon as the
graph allows.

A backward traced in one graph can make every weight gradient at its end, after all the
input gradients (the post-grad graph of ``torch.func.grad_and_value`` does): then every
gradient all-reduce must run within the last stretch of the backward, beside the
weight-gradient matmuls alone. Moving the node that makes a collective's input (and the
views it reads through) to just after the last of its own inputs lets the collectives
start during the rest of the backward too. Only the producer and views move: the values,
and so the bits, stay the same. Memory: the producer's result lives longer and its inputs
may be freed sooner; if the graph's peak would grow beyond the budget, nothing moves.
"""

from __future__ import annotations

import torch.fx as fx

from .cost import _VIEWS


def _movable(n) -> bool:
    """Pure compute or a view: never a collective, a wait or anything with side effects."""
    return isinstance(n, fx.Node) and n.op == "call_function" and not n.is_impure() and \
        "c10d" not in str(n.target)


def hoist_producers(graph: fx.Graph, colls: list, budget: int) -> int:
    """Move each collective's producer (see the module docstring) unless the graph's peak
    would grow by more than ``budget`` bytes. Returns how many producers moved."""
    from .memory import peak_bytes
    from .stalls import relink

    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    inputs_end = max((i for i, n in enumerate(order) if n.op == "placeholder"), default=-1)
    anchor: dict[fx.Node, int] = {}  # moved node -> position of the node it now follows
    moved: list[fx.Node] = []

    def place(n: fx.Node) -> int:
        """Where ``n`` can go: after its inputs, the views it reads through and the work
        only it uses placed as early first."""
        if n in anchor:
            return anchor[n]
        at = inputs_end
        for a in n.all_input_nodes:
            if _movable(a) and (a.target in _VIEWS or len(a.users) == 1):
                at = max(at, place(a))
            else:
                at = max(at, pos[a])
        if at < pos[n] - 1:
            anchor[n] = at
            moved.append(n)
            return at
        return pos[n]

    hoisted = 0
    for c in sorted(colls, key=lambda c: pos[c.start]):
        if c.kind == "commrt_all_reduce":  # runs on the compute stream: nothing to gain
            continue
        src = c.start.args[0]
        while isinstance(src, fx.Node) and src.target in _VIEWS:  # to the computing node
            src = src.args[0]
        if not _movable(src) or src.target in _VIEWS:
            continue
        before = pos[src]
        if place(src) < before - 1:
            hoisted += 1
    if not hoisted:
        return 0
    after: dict[int, list] = {}
    for n in moved:  # inputs were placed before their users: a topological order
        after.setdefault(anchor[n], []).append(n)
    skip = set(moved)
    new = []
    for i, n in enumerate(order):
        if n not in skip:
            new.append(n)
        new += after.get(i, [])
    if peak_bytes(new) > peak_bytes(order) + budget:
        return 0
    relink(graph, new)
    return hoisted
