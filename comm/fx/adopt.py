"""FX pass: functional all-reduces that commrt's kernels would run become commrt's op.

Before (aten, as torch.compile traces DTensor or ``dist.all_reduce``)::

    ar = _c10d_functional.all_reduce(x, "sum", g)
    r = _c10d_functional.wait_tensor(ar)

After::

    r = commrt.all_reduce(x, g)

Rewritten only where

- the dispatcher of group ``g``'s communicator picks one of commrt's own algorithms for
  that size and dtype (the communicator must exist when the graph compiles: made by
  ``commrt.init(group)`` or a first eager all-reduce; making one is collective, and a
  compile that one rank takes from the FX graph cache and another does not would hang);
- nothing but views and other collectives lies between the all-reduce and its wait: an
  all-reduce the overlap pass (which runs first) hides behind compute, on NCCL or on a
  copy of the group (copy engines, fewer CTAs), stays there.

The fused RMSNorm pass runs before this one, so its fused op wins where it applies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
from collections.abc import Callable

import torch
import torch.fx as fx

from commrt.dispatch.dispatcher import Decision
from commrt.errors import ConfigError

from .graph_types import VIEWS, WAIT, node_val, static_bytes

_FUNC_AR = torch.ops._c10d_functional.all_reduce.default
_IDLE = VIEWS | {operator.getitem, WAIT}
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "commrt")
# what the new node takes from the wait it replaces (not ``eager_input_vals``: those are
# the wait's inputs, which Inductor would match against commrt's op's schema)
_META = ("val", "tensor_meta", "stack_trace", "nn_module_stack", "seq_nr")

# (group name, bytes, dtype, device type) -> the decision, or None without a communicator
Decide = Callable[[str, int, torch.dtype, str], "Decision | None"]


@dataclasses.dataclass
class AdoptReport:
    """Every functional all-reduce the pass saw, and why each one it left stayed."""

    all_reduces: int = 0
    adopted: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)


def _existing(group_name: str):
    from commrt import registry

    return registry._BY_NAME.get(group_name)


def _mode() -> str:
    """``graph`` when Inductor captures its graphs in CUDA graphs, else ``eager``."""
    import torch._inductor.config as inductor_config

    return "graph" if inductor_config.triton.cudagraphs else "eager"


def dispatcher_decision(group: str, nbytes: int, dtype: torch.dtype,
                        device_type: str) -> Decision | None:
    """What the communicator of ``group`` decides for such a call (None: no communicator)."""
    comm = _existing(group)
    if comm is None:
        return None
    return comm.dispatcher.decide(nbytes, dtype, "sum", _mode(), device_type)


def state_key() -> bytes:
    """What decisions depend on beyond the graph (the communicators and their facts), for
    the FX graph cache key; identical on every rank (the facts are agreed at init)."""
    from commrt import registry

    parts = sorted((name, c.facts.custom_blocked, c.facts.table.digest if c.facts.table
                    else None, repr(sorted(c.config.describe().items())), c.world_size)
                   for name, c in registry._BY_NAME.items())
    return hashlib.sha256(f"{parts!r}/{_mode()}".encode()).digest()


def _exposed(start: fx.Node, wait: fx.Node) -> bool:
    """Nothing but views and collectives between ``start`` and ``wait``."""
    n = start.next
    while n is not wait:
        if n.op == "output":
            return False
        if n.op == "call_function" and n.target not in _IDLE and \
                getattr(n.target, "namespace", "") not in _COLLECTIVE_NAMESPACES:
            return False
        n = n.next
    return True


def _why_not(node: fx.Node, decide: Decide) -> str | Decision:
    """The decision that lets ``node`` be rewritten, or why it stays."""
    _, op, group = node.args[:3]
    users = list(node.users)
    val = node_val(node)
    nbytes = static_bytes(val)
    if op != "sum":
        return f"op {op} (commrt's kernels only sum)"
    if not isinstance(group, str):
        return "the group is not given by name"
    if len(users) != 1 or users[0].target != WAIT:
        return "result used without exactly one wait"
    if nbytes is None:
        return "dynamic shape"
    if not _exposed(node, users[0]):
        return "hidden behind compute before its wait"
    try:
        d = decide(group, nbytes, val.dtype, val.device.type)
    except ConfigError as exc:
        return str(exc)
    if d is None:
        return f"group {group} has no commrt communicator (commrt.init(group) before compiling)"
    if d.algorithm == "nccl":
        return f"the dispatcher keeps the process group: {d.reason}"
    return d


def adopt_all_reduces(gm: fx.GraphModule | fx.Graph,
                      decide: Decide | None = None) -> AdoptReport:
    """Rewrite functional all-reduces into ``commrt::all_reduce``; see the module docstring.

    ``decide`` defaults to the group's communicator's dispatcher (``dispatcher_decision``).
    """
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    decide = decide or dispatcher_decision
    report = AdoptReport()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != _FUNC_AR:
            continue
        report.all_reduces += 1
        why = _why_not(node, decide)
        if isinstance(why, str):
            report.skipped.append(f"{node.name}: {why}")
            continue
        wait = next(iter(node.users))
        with graph.inserting_after(node):
            new = graph.call_function(torch.ops.commrt.all_reduce.default,
                                      (node.args[0], node.args[2]))
        new.meta.update({k: v for k, v in wait.meta.items() if k in _META})
        wait.replace_all_uses_with(new)
        graph.erase_node(wait)
        graph.erase_node(node)
        report.adopted += 1
    if report.adopted:
        graph.lint()
        if isinstance(gm, fx.GraphModule):
            gm.recompile()
    return report
