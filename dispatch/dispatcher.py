"""Which algorithm runs a call: eligibility first, then the measured table.

Dispatch is data: ``ALGORITHMS`` (all-reduce), ``ALL_GATHER`` and ``REDUCE_SCATTER`` are
the ordered lists of each operation's algorithms with one eligibility check each
(returning why not, or None); ``BY_KIND`` maps a query's operation to its list. The
dispatcher never imports kernels; the communicator maps the chosen name to a launcher.
A query's ``nbytes`` is the bytes of the operation's output: the all-reduced tensor, the
gathered tensor of an all-gather, one rank's shard of a reduce-scatter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch

from commrt.config import Config
from commrt.errors import ConfigError

from .profile import DeviceProfile
from .table import Table

CUSTOM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# PyTorch's symm-mem reduce ops take float32 and bfloat16 only (CUDASymmetricMemoryOps.cu).
SYMM_DTYPES = (torch.bfloat16, torch.float32)
# Our kernels keep one pointer per peer in registers and a signal slot per peer.
MAX_CUSTOM_WORLD = 8
# Algorithms with a kernel fused with the residual add and RMSNorm (symm_mem.fused_rmsnorm).
FUSED = ("one_shot_push", "one_shot", "two_shot_push")
FUSED_KIND = "all_reduce_residual_rmsnorm"
MAX_FUSED_HIDDEN = 16384  # a row must fit one program's registers
# Without a table for this hardware: our one_shot only where any NVLink/xGMI pair wins
# (launch-bound sizes), the process group beyond. Conservative by design.
UNTUNED_CUSTOM_WINDOW = 64 * 1024
# The same window for the all-gather and the reduce-scatter, on the whole message (the
# gathered output, the reduce-scatter's input): each rank moves (world - 1) / world of it,
# less than one_shot moves for an all-reduce of that size, so where one_shot wins these
# launch-bound sizes the single-kernel ag_push and rs_pull do too.
UNTUNED_RULE = {"all_reduce": "one_shot", "all_gather": "ag_push", "reduce_scatter": "rs_pull"}
# ag_push's Lamport slots carry 16- and 32-bit floats; the reduce-scatters sum these in fp32.
PUSH_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# ag_bw copies elements bit for bit: any dtype Triton loads (no bool, no complex).
GATHER_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8,
                 torch.uint8, torch.int16, torch.int32, torch.int64)
# PyTorch's reduce_scatter_out: fp32/bf16, world sizes 2, 4 and 8 (DISPATCH_WORLD_SIZES_NO_DEFAULT
# in CUDASymmetricMemoryOps.cu), elements divisible by world * 16 B.
SYMM_RS_WORLDS = (2, 4, 8)
# Algorithms that cannot write their result into the workspace: one_shot reads every
# rank's workspace until its last barrier, so a ``comm.empty`` tensor reduced in place goes
# through a temporary and a copy (``commrt.custom`` reads this set). ``auto`` passes them
# over for such a tensor (measured on 2 x H200: one_shot on a ``comm.empty``
# tensor was slower than two_shot on one at every size from 4 KiB to 64 MiB in both
# modes, 30-36 µs against 16-21 in eager mode at 256 KiB-4 MiB).
NOT_IN_PLACE = frozenset({"one_shot"})


@dataclasses.dataclass(frozen=True)
class Query:
    """One call as the dispatcher sees it."""

    nbytes: int
    dtype: torch.dtype
    op: str = "sum"  # lower-case ReduceOp name
    mode: str = "eager"  # eager | graph (inside CUDA-graph capture)
    device_type: str = "cuda"
    kind: str = "all_reduce"  # all_reduce_residual_rmsnorm, all_gather or reduce_scatter
    row: int = 0  # elements per row (hidden size) for the fused kind
    resident: bool = False  # the result lands in the workspace (a ``comm.empty`` tensor)


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the group offers, fixed at communicator init and identical on every rank."""

    profile: DeviceProfile
    world_size: int
    config: Config
    table: Table | None = None
    custom_blocked: str = ""  # why our kernels cannot run at all ("" when they can)
    multicast_ptr: bool = False
    multicast_env_off: bool = True
    symm_ops: frozenset[str] = frozenset()
    workspace_bytes: int = 0
    push_bytes: int = 0
    # why NCCL's symmetric kernels cannot run, agreed across ranks ("" when they can;
    # commrt.symm_mem.nccl_symm.probe / agree)
    nccl_symm_blocked: str = "not probed"


@dataclasses.dataclass(frozen=True)
class Decision:
    algorithm: str
    reason: str
    config: Mapping[str, int] = dataclasses.field(default_factory=dict)
    predicted_us: float | None = None

    def __str__(self) -> str:
        return f"{self.algorithm}: {self.reason}"


Check = Callable[[Query, Facts], "str | None"]


def _custom(q: Query, f: Facts) -> str | None:
    if f.custom_blocked:
        return f.custom_blocked
    if q.device_type != "cuda":
        return f"tensor is on {q.device_type}, custom kernels need CUDA"
    if q.op != "sum":
        return f"op {q.op} (custom kernels only sum)"
    if q.dtype not in CUSTOM_DTYPES:
        return f"dtype {q.dtype} (custom kernels take bf16, fp16, fp32)"
    if not 2 <= f.world_size <= MAX_CUSTOM_WORLD:
        return f"world size {f.world_size} (custom kernels take 2 to {MAX_CUSTOM_WORLD})"
    if q.kind == FUSED_KIND and not 0 < q.row <= MAX_FUSED_HIDDEN:
        return f"hidden size {q.row} (fused kernels take 1 to {MAX_FUSED_HIDDEN})"
    return None


def _fusable(check: Check, name: str) -> Check:
    """``check``, plus: the fused kind needs a fused kernel of this algorithm."""
    def fused_check(q: Query, f: Facts) -> str | None:
        if q.kind == FUSED_KIND and name not in FUSED:
            return f"{name} has no kernel fused with residual+RMSNorm"
        return check(q, f)
    return fused_check


def _push(q: Query, f: Facts) -> str | None:
    return _custom(q, f) or (
        f"{q.nbytes} B exceeds the {f.push_bytes} B push slots" if q.nbytes > f.push_bytes
        else None)


def _torch_symm(op_name: str) -> Check:
    def check(q: Query, f: Facts) -> str | None:
        return (
            _custom(q, f)
            or (f"PyTorch's {op_name} is not in this torch" if op_name not in f.symm_ops else None)
            or (f"dtype {q.dtype} (PyTorch's ops take bf16, fp32)"
                if q.dtype not in SYMM_DTYPES else None)
            or (f"{q.nbytes} B exceeds the {f.workspace_bytes} B workspace "
                "(raise COMMRT_MAX_CUSTOM_BYTES)" if q.nbytes > f.workspace_bytes else None)
            or (f"{q.nbytes} B is not a multiple of 16" if q.nbytes % 16 else None)
            or ("fused residual+RMSNorm is ours only" if q.kind != "all_reduce" else None)
        )
    return check


def _multimem(q: Query, f: Facts) -> str | None:
    if f.multicast_env_off:
        return "TORCH_SYMM_MEM_DISABLE_MULTICAST is set"
    if not f.multicast_ptr:
        return "the symmetric handle has no multicast pointer"
    return _torch_symm("multimem_all_reduce_")(q, f)


def _nccl_symm(q: Query, f: Facts) -> str | None:
    """NCCL's symmetric kernels on the NCCL-registered workspace (copy in, reduce, copy out).

    NVLink only: the symmetric kernels need every rank in one NVLink domain (NCCL 2.27
    release notes); commrt's profile knows one host's NVLink mesh, not a multi-node domain.
    Messages beyond the workspace go to the process group's generic path: NCCL's symmetric
    kernel was already slower than its generic one at 16 and 64 MiB (BASELINE.md).
    """
    return (
        f.custom_blocked
        or f.nccl_symm_blocked
        or (f"tensor is on {q.device_type}, NCCL needs CUDA" if q.device_type != "cuda" else None)
        or (f"the group's GPUs are linked by {f.profile.link}, NCCL's symmetric kernels need "
            "one NVLink domain" if f.profile.link != "nvlink" else None)
        or (f"op {q.op} (commrt routes only sums to it)" if q.op != "sum" else None)
        or (f"dtype {q.dtype} (bf16, fp16, fp32 only)" if q.dtype not in CUSTOM_DTYPES else None)
        or (f"{q.nbytes} B exceeds the {f.workspace_bytes} B workspace "
            "(raise COMMRT_MAX_CUSTOM_BYTES)" if q.nbytes > f.workspace_bytes else None)
        or ("fused residual+RMSNorm is ours only" if q.kind != "all_reduce" else None)
    )


def _process_group(q: Query, f: Facts) -> str | None:
    return None


def _collective(q: Query, f: Facts, dtypes: tuple[torch.dtype, ...]) -> str | None:
    """What every all-gather and reduce-scatter kernel of ours needs."""
    return (
        f.custom_blocked
        or (f"tensor is on {q.device_type}, custom kernels need CUDA"
            if q.device_type != "cuda" else None)
        or (f"op {q.op} (custom kernels only sum)"
            if q.kind == "reduce_scatter" and q.op != "sum" else None)
        or (f"dtype {q.dtype} (takes {', '.join(str(d)[6:] for d in dtypes)})"
            if q.dtype not in dtypes else None)
        or (f"world size {f.world_size} (custom kernels take 2 to {MAX_CUSTOM_WORLD})"
            if not 2 <= f.world_size <= MAX_CUSTOM_WORLD else None)
    )


def _ag_push(q: Query, f: Facts) -> str | None:
    return _collective(q, f, PUSH_DTYPES)


def _ag_bw(q: Query, f: Facts) -> str | None:
    return _collective(q, f, GATHER_DTYPES)


def _rs(q: Query, f: Facts) -> str | None:
    return _collective(q, f, PUSH_DTYPES)


def _multimem_ag(q: Query, f: Facts) -> str | None:
    """PyTorch's ``multimem_all_gather_out`` into the start of the workspace (multicast)."""
    return (
        _collective(q, f, GATHER_DTYPES)
        or ("TORCH_SYMM_MEM_DISABLE_MULTICAST is set" if f.multicast_env_off else None)
        or ("the symmetric handle has no multicast pointer" if not f.multicast_ptr else None)
        or ("PyTorch's multimem_all_gather_out is not in this torch"
            if "multimem_all_gather_out" not in f.symm_ops else None)
        or (f"{q.nbytes} B exceeds the {f.workspace_bytes} B workspace "
            "(raise COMMRT_MAX_CUSTOM_BYTES)" if q.nbytes > f.workspace_bytes else None)
        # 16-byte vectors per rank's chunk: no load past the end of an input
        or (f"{q.nbytes} B is not a multiple of world * 16 B"
            if q.nbytes % (16 * f.world_size) else None)
    )


def _symm_rs(q: Query, f: Facts) -> str | None:
    """PyTorch's ``reduce_scatter_out`` on the input copied to the start of the workspace."""
    whole = q.nbytes * f.world_size
    return (
        _collective(q, f, SYMM_DTYPES)
        or ("PyTorch's reduce_scatter_out is not in this torch"
            if "reduce_scatter_out" not in f.symm_ops else None)
        or (f"world size {f.world_size} (PyTorch's kernel takes 2, 4, 8)"
            if f.world_size not in SYMM_RS_WORLDS else None)
        or (f"{whole} B of input exceeds the {f.workspace_bytes} B workspace "
            "(raise COMMRT_MAX_CUSTOM_BYTES)" if whole > f.workspace_bytes else None)
        or (f"{q.nbytes} B per rank is not a multiple of 16" if q.nbytes % 16 else None)
    )


# Dispatch order: also the order `commrt info` lists and rank 0 logs.
ALGORITHMS: tuple[tuple[str, Check], ...] = (
    ("one_shot_push", _fusable(_push, "one_shot_push")),
    ("one_shot", _fusable(_custom, "one_shot")),
    ("two_shot", _fusable(_custom, "two_shot")),
    ("two_shot_push", _fusable(_custom, "two_shot_push")),
    ("symm_one_shot", _torch_symm("one_shot_all_reduce")),
    ("symm_two_shot", _torch_symm("two_shot_all_reduce_")),
    ("multimem", _multimem),
    ("nccl_symm", _nccl_symm),
    ("nccl", _process_group),
)
ALL_GATHER: tuple[tuple[str, Check], ...] = (
    ("ag_push", _ag_push),
    ("ag_bw", _ag_bw),
    ("multimem_ag", _multimem_ag),
    ("nccl", _process_group),
)
REDUCE_SCATTER: tuple[tuple[str, Check], ...] = (
    ("rs_pull", _rs),
    ("rs_push", _rs),
    ("symm_rs", _symm_rs),
    ("nccl", _process_group),
)
BY_KIND = {"all_reduce": ALGORITHMS, FUSED_KIND: ALGORITHMS, "all_gather": ALL_GATHER,
           "reduce_scatter": REDUCE_SCATTER}
_CHECKS = {kind: dict(algos) for kind, algos in BY_KIND.items()}


def why_not(name: str, q: Query, f: Facts) -> str | None:
    """None when ``name`` can run ``q``, else the reason it cannot."""
    checks = _CHECKS[q.kind]
    if name not in checks:
        return f"{name} is not an {q.kind} algorithm"
    if name != "nccl" and name in f.config.disable:
        return f"{name} is switched off by COMMRT_DISABLE"
    return checks[name](q, f)


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def decide(q: Query, f: Facts) -> Decision:
    """The algorithm for one call, with a reason a user can read."""
    d = _decide(q, f)
    if q.kind == FUSED_KIND and d.algorithm == "nccl":
        d = dataclasses.replace(d, reason=d.reason + "; unfused: all-reduce, then add and "
                                "RMSNorm as separate ops")
    return d


def _decide(q: Query, f: Facts) -> Decision:
    forced = f.config.algo_for(q.kind)
    if forced != "auto":
        why = why_not(forced, q, f)
        if why:
            spelled = forced if q.kind in ("all_reduce", FUSED_KIND) else f"{q.kind}:{forced}"
            raise ConfigError(f"COMMRT_ALGO={spelled!r} cannot run this call: {why}")
        return Decision(forced, "forced by COMMRT_ALGO",
                        table_config(f.table, forced, q.nbytes, q.mode, q.kind))
    if q.op != "sum":
        return Decision("nccl", f"op {q.op}: only the process group reduces it")
    if f.custom_blocked:
        return Decision("nccl", f"process group only: {f.custom_blocked}")
    if f.table is not None:
        return _from_table(q, f, f.table)
    return _untuned(q, f)


def _from_table(q: Query, f: Facts, table: Table) -> Decision:
    key = f"{table.generation}/ws{table.world_size}"
    row = table.row_for(q.kind, q.mode, q.nbytes)
    if row is None:  # e.g. a table measured with `commrt tune --only all_reduce`
        return _untuned(q, f, f"its table has no {q.kind} {q.mode} rows")
    skipped = []
    for choice in row.ranking:
        why = why_not(choice.algorithm, q, f)
        if why is None and q.resident and choice.algorithm in NOT_IN_PLACE:
            why = "reduces a comm.empty tensor in place only through a temporary"
        if why is None:
            where = "≤" if q.nbytes <= row.max_bytes else ">"
            reason = (f"{_fmt(q.nbytes)} {where} {_fmt(row.max_bytes)} row of the {key} "
                      f"{q.mode} table")
            if skipped:
                reason += f" (skipped {'; '.join(skipped)})"
            return Decision(choice.algorithm, reason, choice.config, choice.us)
        skipped.append(f"{choice.algorithm}: {why}")
    return Decision("nccl", f"nothing in the {key} row is eligible ({'; '.join(skipped)})")


def table_config(table: Table | None, algorithm: str, nbytes: int, mode: str,
                 kind: str = "all_reduce") -> dict:
    """The launch config ``table`` measured for ``algorithm`` at this size ({} if none)."""
    row = table.row_for(kind, mode, nbytes) if table else None
    for c in row.ranking if row else ():
        if c.algorithm == algorithm:
            return dict(c.config)
    return {}


def _untuned(q: Query, f: Facts, gap: str | None = None) -> Decision:
    gen = f"untuned {f.profile.generation}/ws{f.world_size}" + (f" ({gap})" if gap else "")
    algo = UNTUNED_RULE.get(q.kind, "one_shot")
    why = why_not(algo, q, f)
    whole = q.nbytes * f.world_size if q.kind == "reduce_scatter" else q.nbytes
    if why is None and whole <= UNTUNED_CUSTOM_WINDOW:
        return Decision(algo, f"{gen}: within the {_fmt(UNTUNED_CUSTOM_WINDOW)} "
                        "custom window")
    if why is None:
        return Decision("nccl", f"{gen}: beyond the {_fmt(UNTUNED_CUSTOM_WINDOW)} "
                        "custom window")
    return Decision("nccl", f"{gen}: {why}")


class Dispatcher:
    """``decide`` with a per-(bytes, dtype, op, mode, kind, residency) cache: the hot path
    is one dict get."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self._cache: dict[tuple, Decision] = {}

    def decide(self, nbytes: int, dtype: torch.dtype, op: str = "sum", mode: str = "eager",
               device_type: str = "cuda", kind: str = "all_reduce", row: int = 0,
               resident: bool = False) -> Decision:
        key = (nbytes, dtype, op, mode, device_type, kind, row, resident)
        d = self._cache.get(key)
        if d is None:
            d = decide(Query(nbytes, dtype, op, mode, device_type, kind, row, resident),
                       self.facts)
            self._cache[key] = d
        return d

    def config_for(self, algorithm: str, nbytes: int, mode: str = "graph",
                   kind: str = "all_reduce") -> dict:
        """The table's launch config for ``algorithm`` at this size ({} when untuned)."""
        return table_config(self.facts.table, algorithm, nbytes, mode, kind)

    def predict_us(self, nbytes: int, dtype: torch.dtype, mode: str = "graph",
                   kind: str = "all_reduce") -> float | None:
        """Measured latency of what ``decide`` would run, from the table (None if untuned);
        ``nbytes`` is the output's (the gathered tensor, a reduce-scatter's shard)."""
        d = self.decide(nbytes, dtype, "sum", mode, kind=kind)
        t = self.facts.table
        return t.predict_us(kind, mode, d.algorithm, nbytes) if t else None
