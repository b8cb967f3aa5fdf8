"""Peak memory of a node order, as the overlap pass's budget counts it."""

from __future__ import annotations

import torch.fx as fx

from .graph_types import VIEWS, WAIT, node_val, static_bytes


def peak_bytes(order: list[fx.Node]) -> int:
    """Peak of live tensor bytes along ``order``: a tensor lives from the node that makes
    it to the last use of it or of any alias of it (views, the wait of a collective), so
    moving a wait to the first use of a result that lives on anyway costs nothing."""
    return max(live_bytes(order), default=0)


def live_bytes(order: list[fx.Node]) -> list[int]:
    """Bytes live while each node of ``order`` runs (see ``peak_bytes``)."""
    pos = {n: i for i, n in enumerate(order)}
    root: dict[fx.Node, fx.Node] = {}
    last: dict[fx.Node, int] = {}
    for i, n in enumerate(order):
        src = n.args[0] if n.args and isinstance(n.args[0], fx.Node) else None
        alias = n.op == "call_function" and (n.target == WAIT or n.target in VIEWS)
        r = root.get(src, src) if alias and src is not None else n
        root[n] = r
        end = max((pos[u] for u in n.users if u in pos), default=i)
        last[r] = max(last.get(r, pos.get(r, i)), end)
    frees: dict[int, int] = {}
    live, out = 0, []
    for i, n in enumerate(order):
        if root[n] is n:
            b = static_bytes(node_val(n)) or 0
            live += b
            frees[last[n]] = frees.get(last[n], 0) + b
        out.append(live)
        live -= frees.pop(i, 0)
    return out
