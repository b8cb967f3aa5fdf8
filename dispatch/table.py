"""Tuning tables: measured JSON, keyed by device generation and world size.

A table file looks like::

    {"schema": 1, "generation": "sm90-h200", "world_size": 2,
     "provenance": {"device", "torch", "triton", "nccl", "commrt", "date", "command"},
     "ops": {"all_reduce": {"graph": [row, ...], "eager": [row, ...]}, ...}}

Each row covers messages up to ``max_bytes`` (rows ascending) and ranks the algorithms
measured at that size, fastest first: ``{"max_bytes": 65536, "ranking": [{"algorithm":
"one_shot_push", "config": {...}, "us": 4.1}, ...]}``. The dispatcher takes the first
eligible entry, so a dtype one algorithm lacks falls to the next measured best. A section
names only its operation's algorithms (``commrt.config.OP_ALGORITHMS``; ``nccl_symm`` with
an empty config). ``all_reduce`` is required; ``all_reduce_residual_rmsnorm``,
``all_gather`` and ``reduce_scatter`` are optional (without one the dispatcher's
conservative rule serves that operation, and says "untuned"). Rows key on the bytes of the
operation's output: the gathered tensor of an all-gather, one rank's shard of a
reduce-scatter. Tables are written by ``commrt tune``, never by hand.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import importlib.resources
import json
from collections.abc import Mapping
from typing import Any

from commrt.config import OP_ALGORITHMS
from commrt.errors import ConfigError

SCHEMA = 1
MODES = ("graph", "eager")
OPS = ("all_reduce", "all_reduce_residual_rmsnorm", "all_gather", "reduce_scatter")
_PROVENANCE_KEYS = ("device", "torch", "date", "command", "commrt")


@dataclasses.dataclass(frozen=True)
class Choice:
    algorithm: str
    config: Mapping[str, int]
    us: float


@dataclasses.dataclass(frozen=True)
class Row:
    max_bytes: int
    ranking: tuple[Choice, ...]


@dataclasses.dataclass(frozen=True)
class Table:
    generation: str
    world_size: int
    provenance: Mapping[str, Any]
    ops: Mapping[str, Mapping[str, tuple[Row, ...]]]
    digest: str
    source: str

    def rows(self, op: str, mode: str) -> tuple[Row, ...]:
        return self.ops.get(op, {}).get(mode, ())

    def row_for(self, op: str, mode: str, nbytes: int) -> Row | None:
        """The first row whose ``max_bytes`` covers ``nbytes``; the last row beyond it."""
        rows = self.rows(op, mode)
        if not rows:
            return None
        i = bisect.bisect_left([r.max_bytes for r in rows], nbytes)
        return rows[min(i, len(rows) - 1)]

    def predict_us(self, op: str, mode: str, algorithm: str, nbytes: int) -> float | None:
        """Measured latency of ``algorithm`` interpolated linearly in bytes between rows."""
        points = [(r.max_bytes, c.us) for r in self.rows(op, mode) for c in r.ranking
                  if c.algorithm == algorithm]
        if not points:
            return None
        xs = [p[0] for p in points]
        i = bisect.bisect_left(xs, nbytes)
        if i == 0:
            return points[0][1]
        if i == len(points):
            (x0, y0), (x1, y1) = points[-2] if len(points) > 1 else points[-1], points[-1]
            slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
            return y1 + slope * (nbytes - x1)
        (x0, y0), (x1, y1) = points[i - 1], points[i]
        return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)


def _fail(source: str, where: str, what: str) -> ConfigError:
    return ConfigError(f"tuning table {source}: {where}: {what}")


def _choice(source: str, where: str, raw: Any, op: str) -> Choice:
    if not isinstance(raw, Mapping):
        raise _fail(source, where, f"expected an object, got {type(raw).__name__}")
    algo = raw.get("algorithm")
    names = OP_ALGORITHMS.get(op, OP_ALGORITHMS["all_reduce"])  # the fused op: all-reduce's
    if algo not in names:
        raise _fail(source, where, f"algorithm {algo!r} is not one of {', '.join(names)}")
    config = raw.get("config", {})
    if not isinstance(config, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in config.items()
    ):
        raise _fail(source, where, "config must map names to integers")
    us = raw.get("us")
    if not isinstance(us, (int, float)) or us <= 0:
        raise _fail(source, where, f"us must be a positive number, got {us!r}")
    return Choice(algo, dict(config), float(us))


def _rows(source: str, where: str, raw: Any, op: str) -> tuple[Row, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(source, where, "expected a non-empty list of rows")
    rows = []
    for i, r in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(r, Mapping):
            raise _fail(source, at, "expected an object")
        mb = r.get("max_bytes")
        if not isinstance(mb, int) or mb <= 0:
            raise _fail(source, at, f"max_bytes must be a positive integer, got {mb!r}")
        if rows and mb <= rows[-1].max_bytes:
            raise _fail(source, at, "rows must be in ascending max_bytes order")
        ranking = r.get("ranking")
        if not isinstance(ranking, list) or not ranking:
            raise _fail(source, at, "ranking must be a non-empty list")
        rows.append(Row(mb, tuple(_choice(source, f"{at}.ranking[{k}]", c, op)
                                  for k, c in enumerate(ranking))))
    return tuple(rows)


def parse(data: Any, source: str = "<table>") -> Table:
    """Validate a decoded table; every problem names the file and the place in it."""
    if not isinstance(data, Mapping):
        raise _fail(source, "top level", "expected a JSON object")
    if data.get("schema") != SCHEMA:
        raise _fail(source, "schema", f"expected {SCHEMA}, got {data.get('schema')!r}")
    gen = data.get("generation")
    if not isinstance(gen, str) or not gen:
        raise _fail(source, "generation", "expected a generation key such as 'sm90-h200'")
    ws = data.get("world_size")
    if not isinstance(ws, int) or ws < 2:
        raise _fail(source, "world_size", f"expected an integer >= 2, got {ws!r}")
    prov = data.get("provenance")
    if not isinstance(prov, Mapping):
        raise _fail(source, "provenance", "missing; tables must say who measured them and how")
    missing = [k for k in _PROVENANCE_KEYS if not prov.get(k)]
    if missing:
        raise _fail(source, "provenance", f"missing {', '.join(missing)}")
    ops_raw = data.get("ops")
    if not isinstance(ops_raw, Mapping) or "all_reduce" not in ops_raw:
        raise _fail(source, "ops", "expected an object with at least 'all_reduce'")
    ops: dict[str, dict[str, tuple[Row, ...]]] = {}
    for op, modes in ops_raw.items():
        if op not in OPS:
            raise _fail(source, f"ops.{op}", f"unknown op; expected one of {', '.join(OPS)}")
        if not isinstance(modes, Mapping) or set(modes) - set(MODES) or not modes:
            raise _fail(source, f"ops.{op}", f"expected modes among {', '.join(MODES)}")
        ops[op] = {m: _rows(source, f"ops.{op}.{m}", rows, op) for m, rows in modes.items()}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return Table(gen, ws, dict(prov), ops, digest, source)


def load_file(path: str) -> Table:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError(f"tuning table {path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"tuning table {path}: not valid JSON ({exc})") from None
    return parse(data, path)


def load_override(path: str) -> Table:
    """The table ``COMMRT_TABLE`` names; a file that cannot serve says so, naming both."""
    try:
        return load_file(path)
    except ConfigError as exc:
        raise ConfigError(f"COMMRT_TABLE={path!r}: {exc}; point it at a table that "
                          "`commrt tune` wrote, or unset it") from None


def shipped_name(generation: str, world_size: int) -> str:
    return f"{generation}_ws{world_size}.json"


def find(generation: str, world_size: int, override: str | None = None) -> Table | None:
    """The table for this generation and world size: ``override`` first, then shipped ones.

    An override made for other hardware is an error, not a silent mismatch.
    """
    if override:
        table = load_override(override)
        if (table.generation, table.world_size) != (generation, world_size):
            raise ConfigError(
                f"COMMRT_TABLE={override!r} was measured for {table.generation} at world size "
                f"{table.world_size}, but this group is {generation} at world size {world_size}"
            )
        return table
    res = importlib.resources.files("commrt.tuning_tables").joinpath(
        shipped_name(generation, world_size))
    if not res.is_file():
        return None
    return parse(json.loads(res.read_text()), f"commrt/tuning_tables/{res.name}")
