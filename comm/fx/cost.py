"""Cost model of the FX passes: communication from commrt's measured tables, compute from
FLOP and byte counts against the device profile. Pure and deterministic: every rank
predicts the same numbers for the same graph."""

from __future__ import annotations

import dataclasses
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
# Host µs to launch one collective when no CUDA graph replays the step: dist.all_reduce,
# host_overhead_sm90-h200_ws2.txt (2026-11-22, the later of its two runs). Collectives
# issued back to back are bound by it: 64 of them take 1.5 ms whatever their size.
HOST_US = 23.14
# Share of compute speed lost while a collective runs beside it (compute advances at
# 1 - share µs per µs). NCCL: the training step's compute stretched 4.50 ms over 7.48 ms
# of hidden NCCL time (fx_overlap_sm90-h200_ws2.json, 2026-11-23, rows "compiled" and
# "(nccl)"); 8192² matmuls, 2.77 over 4.17 ms (copy_engine_sm90-h200_ws2.json,
# 2026-11-22). Copy engines (exchanges: the pack and the sums run on SMs): 2.73 over
# 7.99 ms on the same step (fx_overlap_sm90-h200_ws2.json, row "commrt.fx").
CONTENTION = {"nccl": 0.60, "ce": 0.34}
# The copy-engine group's all-reduce alone, µs by bytes (copy_engine_sm90-h200_ws2.json,
# 2026-11-22, 0 lanes): about 0.1 ms whatever the size, from its barriers.
_CE_POINTS = ((256 << 10, 106.7), (1 << 20, 113.9), (4 << 20, 106.1), (16 << 20, 143.7),
              (64 << 20, 324.4))
# commrt's ops the dispatcher prices by their operation (``dispatch.dispatcher.BY_KIND``)
_COMMRT_OPS = {"commrt_all_gather": "all_gather", "commrt_reduce_scatter": "reduce_scatter"}


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
        self.host_us = 0.0 if _replayed() else HOST_US
        self._compute: dict[torch.fx.Node, float] = {}

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (instances live for one pass)
    def comm_us(self, kind: str, nbytes: int, dtype: torch.dtype, group: str) -> float:
        """Predicted µs of one collective whose output has ``nbytes``. ``commrt::all_reduce``
        at the fastest algorithm's time in commrt's measured table (what auto runs);
        ``commrt::all_gather`` / ``reduce_scatter`` at what the dispatcher of the group's
        communicator predicts for its choice, else at the fastest in the table's rows of
        their operation, else as the process group runs them; a functional collective at
        the table's ``nccl`` time (the process group runs it). An all-gather or
        reduce-scatter without rows of its own, which moves half the bytes, at half an
        all-reduce of twice its size."""
        op = _COMMRT_OPS.get(kind)
        if op is not None:
            us = _dispatcher_us(group, nbytes, dtype, op)
            if us is None:
                us = _table_us(self.generation, _world(group), nbytes, dtype, None, op)
            if us is not None:
                return us
            kind = op
        if kind in ("all_gather", "reduce_scatter"):
            us = _table_us(self.generation, _world(group), nbytes, dtype, "nccl", kind)
            if us is not None:
                return us
        ar_bytes = nbytes if kind in ("all_reduce", "commrt_all_reduce") else nbytes * 2
        us = _table_us(self.generation, _world(group), ar_bytes, dtype,
                       None if kind == "commrt_all_reduce" else "nccl")
        if us is None:
            world = _world(group)
            bus = 2 * (world - 1) / world * ar_bytes
            us = _FALLBACK_LATENCY_US + bus / (_FALLBACK_BUS_GBPS * 1e3)
        return us if kind in ("all_reduce", "commrt_all_reduce") else us / 2

    def ce_us(self, nbytes: int) -> float:
        """Predicted µs of one exchange on the copy-engine group (``_CE_POINTS``)."""
        pts = _CE_POINTS
        if nbytes <= pts[0][0]:
            return pts[0][1]
        i = next((k for k in range(1, len(pts)) if nbytes <= pts[k][0]), len(pts) - 1)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)

    def copy_us(self, nbytes: int) -> float:
        """µs to pack ``nbytes`` into a bucket (read and write, memory bound)."""
        return 2 * nbytes / self.bandwidth * 1e6

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


@dataclasses.dataclass
class Bucket:
    """One collective of a bucketing plan, as the plan's simulation prices it."""

    members: list  # the graph's collectives (``Coll``) it merges
    stream: str  # the stream it runs on: its group, or its group's copy-engine copy
    us: float
    contention: float  # ``CONTENTION`` of its transport (0 on the compute stream)
    cat_us: float = 0.0  # packing its members on the compute stream
    sync: bool = False  # runs on the compute stream (commrt's ops)


class Timeline:
    """One step's clocks: the host issues in order (``host_us`` per collective), the compute
    stream runs each node after its launch, each comm stream runs its collectives one at a
    time from when they are issued and their inputs exist; compute beside a running
    collective advances at ``1 - contention`` µs per µs."""

    def __init__(self, host_us: float):
        self.host_us, self.host, self.clock = host_us, 0.0, 0.0
        self.exposed = self.comm = 0.0
        self.busy: dict[str, list] = {}  # stream -> [(begin, end, contention)], in order
        self.head: dict[str, int] = {}

    def compute(self, us: float) -> None:
        self.clock = self._advance(max(self.clock, self.host), us)

    def issue(self, stream: str, us: float, contention: float, sync: bool = False) -> float:
        """Issue one collective; returns when it ends."""
        self.host += self.host_us
        self.comm += us
        if sync:  # on the compute stream
            self.clock = max(self.clock, self.host) + us
            self.exposed += us
            return self.clock
        spans = self.busy.setdefault(stream, [])
        begin = max(self.host, self.clock, spans[-1][1] if spans else 0.0)
        spans.append((begin, begin + us, contention))
        return begin + us

    def wait(self, done: float) -> None:
        if done > self.clock:
            self.exposed += done - self.clock
            self.clock = done

    def _advance(self, t: float, work: float) -> float:
        while work > 0:
            share, nxt = 0.0, float("inf")
            for s, spans in self.busy.items():
                i = self.head.get(s, 0)
                while i < len(spans) and spans[i][1] <= t:
                    i += 1
                self.head[s] = i
                if i < len(spans):
                    b, e, k = spans[i]
                    share, nxt = (max(share, k), min(nxt, e)) if b <= t else \
                        (share, min(nxt, b))
            rate = 1.0 - share
            if t + work / rate <= nxt:
                return t + work / rate
            work -= (nxt - t) * rate
            t = nxt
        return t


def _replayed() -> bool:
    """Whether Inductor replays its graphs as CUDA graphs (no host cost per launch)."""
    try:
        import torch._inductor.config as inductor_config

        return bool(inductor_config.triton.cudagraphs)
    except Exception:
        return False


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


def _table_us(generation: str, world: int, nbytes: int, dtype, algorithm: str | None = None,
              op: str = "all_reduce") -> float | None:
    """Graph-mode µs of ``algorithm`` running ``op`` at ``nbytes`` (None: the fastest in the
    row)."""
    t = _table(generation, world)
    if t is None:
        return None
    if algorithm is not None:
        us = t.predict_us(op, "graph", algorithm, nbytes)
        if us is not None:
            return us
    row = t.row_for(op, "graph", nbytes)
    if row is None:
        return None
    best = [t.predict_us(op, "graph", c.algorithm, nbytes) for c in row.ranking]
    best = [b for b in best if b is not None]
    return min(best) if best else None


def _dispatcher_us(group: str, nbytes: int, dtype, op: str) -> float | None:
    """Graph-mode µs the dispatcher of ``group``'s communicator predicts for ``op`` at
    ``nbytes`` of output (None: no communicator, or its table has no such row)."""
    from commrt import registry
    from commrt.errors import ConfigError

    comm = registry._BY_NAME.get(group)
    if comm is None:
        return None
    try:
        return comm.dispatcher.predict_us(nbytes, dtype, "graph", kind=op)
    except ConfigError:  # COMMRT_ALGO forces an algorithm that cannot run such a call
        return None
