"""Cost model of the FX passes: communication from commrt's measured tables, compute from
FLOP and byte counts against the device profile. Pure and deterministic: every rank
predicts the same numbers for the same graph."""

from __future__ import annotations

import functools

import torch

from .graph_types import VIEWS

aten = torch.ops.aten
# Conservative fallbacks where no table or profile answers (stated, not measured):
_FALLBACK_LATENCY_US = 10.0
_FALLBACK_BUS_GBPS = 100.0
# Dense bf16 and memory rates by generation prefix, below the datasheets (Hopper ~800
# TFLOP/s and 3.3-4.8 TB/s measured on the lent machines, see ../../.library KINDS.md).
_RATES = {"sm90": (700e12, 3.0e12), "sm100": (1500e12, 6.0e12), "sm80": (250e12, 1.5e12),
          "gfx942": (600e12, 4.0e12), "cpu": (1e12, 50e9)}
_FREE = {"placeholder", "output", "get_attr"}


def _numel(v) -> int:
    try:
        return int(v.numel()) if isinstance(v, torch.Tensor) else 0
    except Exception:
        return 0


def _bytes(v) -> int:
    if isinstance(v, (tuple, list)):
        return sum(_bytes(x) for x in v)
    return _numel(v) * v.element_size() if isinstance(v, torch.Tensor) else 0


class CostModel:
    def __init__(self, profile=None):
        self.profile = profile
        gen = getattr(profile, "generation", None) or _local_generation()
        key = next((k for k in _RATES if gen.startswith(k)), "cpu")
        self.flops, self.bandwidth = _RATES[key]
        self.generation = gen
        self._compute: dict[torch.fx.Node, float] = {}

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (instances live for one pass)
    def comm_us(self, kind: str, nbytes: int, dtype: torch.dtype, group: str) -> float:
        """Predicted µs of one collective from commrt's measured table: ``commrt::all_reduce``
        at the fastest algorithm's time (what auto runs), a functional collective at the
        table's ``nccl`` time (the process group runs it); all-gather and reduce-scatter,
        which move half the bytes, at half an all-reduce of twice their size."""
        ar_bytes = nbytes if kind in ("all_reduce", "commrt_all_reduce") else nbytes * 2
        us = _table_us(self.generation, _world(group), ar_bytes, dtype,
                       None if kind == "commrt_all_reduce" else "nccl")
        if us is None:
            world = _world(group)
            bus = 2 * (world - 1) / world * ar_bytes
            us = _FALLBACK_LATENCY_US + bus / (_FALLBACK_BUS_GBPS * 1e3)
        return us if kind in ("all_reduce", "commrt_all_reduce") else us / 2

    def compute_us(self, node: torch.fx.Node) -> float:
        us = self._compute.get(node)
        if us is None:
            us = self._compute[node] = self._compute_us(node)
        return us

    def _compute_us(self, node: torch.fx.Node) -> float:
        if node.op in _FREE or node.target in VIEWS or node.target is getattr:
            return 0.0
        if node.op != "call_function":
            return 0.0
        out = node.meta.get("val")
        flops = _flops(node)
        moved = _bytes(out) + sum(_bytes(a.meta.get("val")) for a in node.all_input_nodes)
        return max(flops / self.flops, moved / self.bandwidth) * 1e6


def _flops(node: torch.fx.Node) -> float:
    t = node.target
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args]
    try:
        if t in (aten.mm.default, aten.addmm.default):
            a, b = (vals[0], vals[1]) if t == aten.mm.default else (vals[1], vals[2])
            return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        if t in (aten.bmm.default, aten.baddbmm.default):
            a, b = (vals[0], vals[1]) if t == aten.bmm.default else (vals[1], vals[2])
            return 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        if "scaled_dot_product" in str(t):
            q, k = vals[0], vals[1]
            return 4.0 * _numel(q) * k.shape[-2]
    except Exception:
        return 0.0
    return 0.0


def _local_generation() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    from commrt.dispatch.profile import local_facts

    return local_facts().generation


def group_size(group: str) -> int | None:
    """The size of the process group named ``group``; None if this process has none."""
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        return dist.get_world_size(_resolve_process_group(group))
    except Exception:
        return None


def _world(group: str) -> int:
    return group_size(group) or 2


@functools.lru_cache(maxsize=64)
def _table(generation: str, world: int):
    from commrt.dispatch import table

    try:
        return table.find(generation, world)
    except Exception:
        return None


def _table_us(generation: str, world: int, nbytes: int, dtype,
              algorithm: str | None = None) -> float | None:
    """Graph-mode µs of ``algorithm`` at ``nbytes`` (None: the fastest in the row)."""
    t = _table(generation, world)
    if t is None:
        return None
    if algorithm is not None:
        us = t.predict_us("all_reduce", "graph", algorithm, nbytes)
        if us is not None:
            return us
    row = t.row_for("all_reduce", "graph", nbytes)
    if row is None:
        return None
    best = [t.predict_us("all_reduce", "graph", c.algorithm, nbytes) for c in row.ranking]
    best = [b for b in best if b is not None]
    return min(best) if best else None
