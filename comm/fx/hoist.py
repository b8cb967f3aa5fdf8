"""The first step of ``overlap_and_bucket``: compute a collective's input as soon as the
graph allows.

A backward traced in one graph can make every weight gradient at its end, after all the
input gradients (the post-grad graph of ``torch.func.grad_and_value`` does): then every
gradient all-reduce must run within the last stretch of the backward, beside the
weight-gradient matmuls alone. Moving the node that makes a collective's input (and the
views it reads through) to just after the last of its own inputs lets the collectives
start during the rest of the backward too. Only the producer, the views it reads
through and the work only it uses move: the values, and so the bits, stay the same.
Memory: the producer's result lives longer and its inputs may be freed sooner; producers
move while the graph's peak stays within the budget, those that move least first.
"""

from __future__ import annotations

import torch.fx as fx

from .graph_types import SYNC_KINDS, VIEWS, Coll
from .memory import peak_bytes
from .stalls import relink

MAX_DEPTH = 64  # how far back through views and private work one producer is followed


def _movable(n) -> bool:
    """Pure compute or a view: never a collective, a wait or anything with side effects."""
    if not (isinstance(n, fx.Node) and n.op == "call_function") or n.is_impure():
        return False
    namespace = getattr(n.target, "namespace", "")
    return "c10d" not in namespace and namespace != "commrt"


def hoist_producers(graph: fx.Graph, colls: list[Coll], budget: int) -> tuple[int, int]:
    """Move collectives' producers (see the module docstring) while the graph's peak grows
    by at most ``budget`` bytes: those that move least first (a gradient made early lives
    beside the activations still held), as many as fit. Returns (producers moved, those
    left in place for memory)."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    inputs_end = max((i for i, n in enumerate(order) if n.op == "placeholder"), default=-1)
    anchor: dict[fx.Node, int] = {}  # moved node -> position of the node it now follows
    needs: dict[fx.Node, frozenset] = {}  # moved node -> the moved nodes it needs, itself too

    def place(n: fx.Node, depth: int = 0) -> int:
        """Where ``n`` can go: after its inputs, the views it reads through and the work
        only it uses placed as early first."""
        if n in anchor:
            return anchor[n]
        at, need = inputs_end, set()
        for a in n.all_input_nodes:
            if depth < MAX_DEPTH and _movable(a) and (a.target in VIEWS or len(a.users) == 1):
                at = max(at, place(a, depth + 1))
                need |= needs.get(a, frozenset())
            else:
                at = max(at, pos[a])
        if at < pos[n] - 1:
            anchor[n] = at
            needs[n] = frozenset(need | {n})
        return anchor.get(n, pos[n])

    candidates = []
    for c in sorted(colls, key=lambda c: pos[c.start]):
        if c.kind in SYNC_KINDS:  # runs on the compute stream: nothing to gain
            continue
        src = c.start.args[0]
        while isinstance(src, fx.Node) and src.target in VIEWS:  # to the computing node
            src = src.args[0]
        if _movable(src) and src.target not in VIEWS and place(src) < pos[src] - 1:
            candidates.append(src)
    if not candidates:
        return 0, 0
    candidates.sort(key=lambda n: (-anchor[n], pos[n]))  # least moved first
    base = peak_bytes(order)

    def arranged(k: int) -> list:
        """The order with the first ``k`` candidates moved. A moved node's moved inputs
        have no later anchor and an earlier position, so they come first."""
        chosen = set().union(*(needs[n] for n in candidates[:k]))
        after: dict[int, list] = {}
        for n in sorted(chosen, key=lambda n: (anchor[n], pos[n])):
            after.setdefault(anchor[n], []).append(n)
        new = []
        for i, n in enumerate(order):
            if n not in chosen:
                new.append(n)
            new += after.get(i, [])
        return new

    lo, hi, best = 0, len(candidates), arranged(len(candidates))
    if peak_bytes(best) <= base + budget:  # all of them (also where the peak falls)
        lo = hi
    else:  # the most, least moved first, that fit the budget
        best = None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        new = arranged(mid)
        if peak_bytes(new) <= base + budget:
            lo, best = mid, new
        else:
            hi = mid - 1
    if best is not None:
        relink(graph, best)
    return lo, len(candidates) - lo
