"""Counts of the collectives commrt ran, per operation and algorithm.

``record`` is on the hot path of every call: one dict increment (the prebound eager
path increments ``COUNTS`` itself, with a key made once). ``commrt.stats()`` reads the
counts; ``COMMRT_LOG=1`` prints them on rank 0 when the process exits.
"""

from __future__ import annotations

import atexit
import sys
from collections import defaultdict

COUNTS: defaultdict[tuple[str, str], int] = defaultdict(int)  # (op, algorithm) -> calls
_AT_EXIT = False


def record(op: str, algorithm: str) -> None:
    """Count one call of ``op`` (``all_reduce``, ...) that ran ``algorithm``."""
    COUNTS[op, algorithm] += 1


def stats(reset: bool = False) -> dict[str, dict[str, int]]:
    """``{op: {algorithm: calls}}`` since start or the last ``stats(reset=True)``."""
    out: dict[str, dict[str, int]] = {}
    for (op, algo), n in sorted(COUNTS.items()):
        out.setdefault(op, {})[algo] = n
    if reset:
        COUNTS.clear()
    return out


def format_stats(counts: dict[str, dict[str, int]]) -> str:
    """One line per operation: ``all_reduce: 120 calls (two_shot 100, nccl 20)``."""
    lines = []
    for op, per_algo in counts.items():
        total = sum(per_algo.values())
        parts = ", ".join(f"{a} {n}" for a, n in sorted(per_algo.items(), key=lambda kv: -kv[1]))
        lines.append(f"{op}: {total} calls ({parts})")
    return "\n".join(lines) if lines else "no collectives ran through commrt"


def _print_at_exit() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    print("commrt: " + format_stats(stats()).replace("\n", "\ncommrt: "), file=sys.stderr)


def print_at_exit() -> None:
    """Print the counts on rank 0 when the process exits (once, however often called)."""
    global _AT_EXIT
    if not _AT_EXIT:
        _AT_EXIT = True
        atexit.register(_print_at_exit)
