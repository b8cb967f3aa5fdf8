"""The one place that reads ``COMMRT_*`` environment variables.

Every variable is declared once in ``VARIABLES`` (name, default, parser, doc), read
once into a frozen :class:`Config`, and validated there. A bad value raises
:class:`ConfigError` naming the variable, the value received and what is accepted.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError

# Every algorithm name commrt knows per operation, in dispatch order (the dispatcher owns
# the logic; these lists only validate user input). ``nccl`` (the process group) serves
# every operation; every other name belongs to one.
OP_ALGORITHMS = {
    "all_reduce": ("one_shot_push", "one_shot", "two_shot", "two_shot_push", "symm_one_shot",
                   "symm_two_shot", "multimem", "nccl_symm", "nccl"),
    "all_gather": ("ag_push", "ag_bw", "multimem_ag", "nccl"),
    "reduce_scatter": ("rs_pull", "rs_push", "symm_rs", "nccl"),
}
OPS = tuple(OP_ALGORITHMS)
ALGORITHMS = tuple(dict.fromkeys(a for names in OP_ALGORITHMS.values() for a in names))

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bytes(text: str) -> int:
    """``'64MB'`` -> 64_000_000, ``'1GiB'`` -> 2**30, ``'4096'`` -> 4096."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError("expected a size such as 4096, 64KB, 64MB, 1GiB")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value != int(value):
        raise ValueError("a size must be a whole number of bytes")
    return int(value)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("expected one of 1, 0, true, false, yes, no, on, off")


def _auto_bool(text: str) -> bool | None:
    """``auto`` -> None (the caller decides), else as ``_bool``."""
    if text.strip().lower() == "auto":
        return None
    try:
        return _bool(text)
    except ValueError:
        raise ValueError("expected auto, or one of 1, 0, true, false, yes, no, on, off") \
            from None


def _ops_of(name: str) -> tuple[str, ...]:
    """The operations a bare algorithm name forces (``nccl``: all of them)."""
    return tuple(op for op, names in OP_ALGORITHMS.items() if name in names)


_ALGO_HELP = ("expected auto, an algorithm name, or a comma list of op:algorithm pairs such as "
              "all_gather:ag_bw,reduce_scatter:rs_push; " + "; ".join(
                  f"{op}: {', '.join(names)}" for op, names in OP_ALGORITHMS.items()))


def _algo(text: str) -> tuple[tuple[str, str], ...]:
    """``COMMRT_ALGO`` -> sorted ``(op, algorithm)`` pairs; ``auto`` (or ``op:auto``) forces
    nothing. A bare name forces the operation that has it (``nccl``: every operation)."""
    forced: dict[str, str] = {}
    for item in (i.strip().lower() for i in text.split(",") if i.strip()):
        op, sep, name = item.rpartition(":")
        if sep and op not in OP_ALGORITHMS:
            raise ValueError(f"unknown operation {op!r}; " + _ALGO_HELP)
        if name != "auto" and not (name in OP_ALGORITHMS[op] if sep else _ops_of(name)):
            raise ValueError(f"{name!r} is not {'an ' + op if sep else 'an'} algorithm; "
                             + _ALGO_HELP)
        for o in (op,) if sep else (_ops_of(name) if name != "auto" else OPS):
            if o in forced:
                raise ValueError(f"{o} is named twice; " + _ALGO_HELP)
            forced[o] = name
    return tuple(sorted((op, name) for op, name in forced.items() if name != "auto"))


def _disable(text: str) -> frozenset[str]:
    names = {n.strip().lower() for n in text.split(",") if n.strip()}
    if "all" in names:
        if len(names) > 1:
            raise ValueError("'all' cannot be combined with algorithm names")
        return frozenset(a for a in ALGORITHMS if a != "nccl")  # every operation's
    unknown = sorted(names - set(ALGORITHMS))
    if unknown:
        raise ValueError(
            f"unknown algorithm {', '.join(unknown)}; expected 'all' or a comma list of "
            + ", ".join(ALGORITHMS)
        )
    if "nccl" in names:
        raise ValueError("nccl (the process group) cannot be disabled; it is the fallback")
    return frozenset(names)


SYMM_BACKENDS = ("auto", "nccl")


def _symm_backend(text: str) -> str:
    name = text.strip().lower() or "auto"
    if name not in SYMM_BACKENDS:
        raise ValueError("expected one of " + ", ".join(SYMM_BACKENDS))
    return name


def _positive_bytes(text: str) -> int:
    value = parse_bytes(text)
    if value <= 0:
        raise ValueError("expected a size greater than zero")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number of seconds such as 10 or 0.5") from None
    if not value > 0:
        raise ValueError("expected a number of seconds greater than zero")
    return value


def _ctas(text: str) -> int:
    try:
        value = int(text.strip() or "0")
    except ValueError:
        raise ValueError("expected a whole number of CTAs, 0 for no limit") from None
    if not 0 <= value <= 64:
        raise ValueError("expected 0 (no limit) to 64 CTAs")
    return value


def _path(text: str) -> str | None:
    text = text.strip()
    if not text:
        return None
    if not os.path.isfile(text):
        raise ValueError("expected the path of an existing tuning-table JSON file")
    return text


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    field: str
    default: str
    parse: Callable[[str], Any]
    doc: str


VARIABLES: tuple[Variable, ...] = (
    Variable("COMMRT_ALGO", "forced", "auto", _algo,
             "auto (measured tables), an algorithm name to force for the operation that has "
             "it (nccl: every operation), or op:algorithm pairs, e.g. "
             "all_gather:ag_bw,reduce_scatter:rs_push"),
    Variable("COMMRT_DISABLE", "disable", "", _disable,
             "'all' (process group only) or a comma list of algorithms to switch off"),
    Variable("COMMRT_TABLE", "table", "", _path,
             "a tuning-table JSON file to use instead of the shipped ones"),
    Variable("COMMRT_MAX_CUSTOM_BYTES", "max_custom_bytes", "64MiB", _positive_bytes,
             "size of the symmetric workspace; larger messages are reduced in pieces"),
    Variable("COMMRT_SYMM_BACKEND", "symm_backend", "auto", _symm_backend,
             "auto: the workspace uses PyTorch's symmetric-memory backend as the process has "
             "it; nccl: commrt.init() sets it to NCCL first (for nccl_symm; PyTorch keeps it "
             "for the whole process)"),
    Variable("COMMRT_LOG", "log", "0", _bool, "log each new decision (rank 0)"),
    Variable("COMMRT_CHECK", "check", "0", _bool,
             "compare shape, dtype and op (fused op: also residual and weight) across ranks "
             "before each eager call"),
    Variable("COMMRT_SPIN_TIMEOUT", "spin_timeout", "30", _seconds,
             "seconds a kernel waits for a peer before it gives up with an error"),
    Variable("COMMRT_PARTITIONED_SCATTER", "partitioned_scatter", "0", _bool,
             "let commrt.fx.install() spread contended accumulating scatters"),
    Variable("COMMRT_FX_COMM_CTAS", "fx_comm_ctas", "0", _ctas,
             "commrt.fx.install(): run the graphs' NCCL collectives on a copy of their group "
             "limited to this many CTAs (0: no limit)"),
    Variable("COMMRT_FX_COPY_ENGINE", "fx_copy_engine", "0", _auto_bool,
             "commrt.fx.install(): run the graphs' hidden sum/avg all-reduces on a "
             "copy-engine group (data moved by the copy engines, not the SMs); auto: where "
             "the group is two NCCL ranks on GPUs; off by default "
             "(docs/decisions/2026-11-29-overlap-copy-engine-path-off-default.md)"),
    Variable("COMMRT_PATCH", "patch", "1", _bool,
             "`python -m commrt.run` patches torch's all-reduces before running the script; "
             "0 runs it unpatched through the same command (read by that launcher only)"),
)


@dataclasses.dataclass(frozen=True)
class Config:
    forced: tuple[tuple[str, str], ...] = ()  # COMMRT_ALGO: (operation, algorithm) pairs
    disable: frozenset[str] = frozenset()
    table: str | None = None
    max_custom_bytes: int = 64 * 1024**2
    symm_backend: str = "auto"
    log: bool = False
    check: bool = False
    spin_timeout: float = 30.0
    partitioned_scatter: bool = False
    fx_comm_ctas: int = 0
    fx_copy_engine: bool | None = False  # None: auto
    patch: bool = True

    @property
    def algo(self) -> str:
        """The algorithm COMMRT_ALGO forces for the all-reduce (``auto``: none)."""
        return self.algo_for("all_reduce")

    def algo_for(self, op: str) -> str:
        """The algorithm COMMRT_ALGO forces for ``op`` (``auto``: none). The fused
        all-reduce + RMSNorm follows the all-reduce."""
        op = "all_reduce" if op not in OP_ALGORITHMS else op
        return next((name for o, name in self.forced if o == op), "auto")

    def describe(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["disable"] = sorted(self.disable)
        out["forced"] = dict(self.forced)
        return out


def load(environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate every ``COMMRT_*`` variable; unknown ``COMMRT_*`` names are errors."""
    env = os.environ if environ is None else environ
    known = {v.name for v in VARIABLES}
    for name in env:
        if name.startswith("COMMRT_") and name not in known:
            raise ConfigError(
                f"{name} is not a commrt variable; known variables are {', '.join(sorted(known))}"
            )
    values: dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name, var.default)
        try:
            values[var.field] = var.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{var.name}={raw!r} is not valid: {exc}") from None
    cfg = Config(**values)
    clash = [name for _, name in cfg.forced if name in cfg.disable]
    if clash:
        raise ConfigError(
            f"COMMRT_ALGO={env.get('COMMRT_ALGO')!r} names {clash[0]}, an algorithm that "
            "COMMRT_DISABLE switches off; drop it from one of them"
        )
    return cfg


def multicast_disabled_by_env(environ: Mapping[str, str] | None = None) -> bool:
    """True when PyTorch's ``TORCH_SYMM_MEM_DISABLE_MULTICAST`` asks for no multicast.

    Read here, never written: commrt only refuses multimem when it is set.
    """
    env = os.environ if environ is None else environ
    return env.get("TORCH_SYMM_MEM_DISABLE_MULTICAST", "").strip().lower() not in _FALSE


def torchrun_env(environ: Mapping[str, str] | None = None) -> dict[str, int] | None:
    """``{rank, world_size, local_rank}`` when launched by torchrun, else None."""
    env = os.environ if environ is None else environ
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return None
    return {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"]),
            "local_rank": int(env.get("LOCAL_RANK", env["RANK"]))}


_CURRENT: Config | None = None


def get() -> Config:
    """The process-wide config, read on first use."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = load()
    return _CURRENT


def reload() -> Config:
    """Re-read the environment (tests, or after changing variables before init)."""
    global _CURRENT
    _CURRENT = load()
    return _CURRENT
