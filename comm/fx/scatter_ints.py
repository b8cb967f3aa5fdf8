"""A Triton kernel for accumulating scatters of int64 values (``scatter_rule.int_adds``)
behind ``commrt::partitioned_index_put`` on CUDA.

torch's index_put/index_add adds int64 with a compare-and-swap loop an element, and
Inductor hands int64 scatters to torch's kernel; Triton adds them with the GPU's native
64-bit atomics (``red.add.u64``: two's complement, so the sums wrap as torch's do and
are exact). One launch, ``_int_adds``: a program adds ``SUB`` value rows, ``DP`` columns
at a time, to copy ``j % P`` of value row ``j``; with one copy (``P = 1``) that copy is
the output, a clone of ``self``, else torch sums ``self`` and the zeroed copies after
it. An index out of range is a device-side assert, as torch's (Triton's debug is on).
"""

import functools

import torch
import triton
import triton.language as tl

from commrt.symm_mem.launch import Launcher, cdiv, next_pow2, replay_call

from .scatter_kernels import _rows_of, scatter_shape
from .scatter_rule import INT_DTYPES

ELEMENTS = 2048  # value elements a program a step ([SUB, DP])
MAX_COLUMNS = 1024  # DP: columns a step
WARPS = 4


@triton.jit
def _int_adds(out, idx, vals, n, rows, P, D: tl.constexpr, DP: tl.constexpr,
              SUB: tl.constexpr, WIDE: tl.constexpr):
    r = tl.program_id(0) * SUB + tl.arange(0, SUB)
    if WIDE:
        r = r.to(tl.int64)
    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)
    tl.device_assert(bad == 0, "index out of range in a commrt scatter")
    dst = ((r % P) * rows + i) * D  # copy j % P of value row j
    c = tl.arange(0, DP)
    for c0 in range(0, D, DP):
        cc = c0 + c
        m = ok[:, None] & (cc < D)[None, :]
        v = tl.load(vals + r[:, None] * D + cc[None, :], mask=m, other=0)
        tl.atomic_add(out + dst[:, None] + cc[None, :], v, mask=m, sem="relaxed")


DTYPES = INT_DTYPES

# without Triton's per-call argument binding (symm_mem.launch); debug keeps the assert,
# and no overflow checks: the sums wrap as torch's do
run_adds = Launcher(_int_adds, debug=True, sanitize_overflow=False)


def int_index_add(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                  partitions: int = 1, replay: list | None = None) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) of integer values with native
    atomics, into ``partitions`` copies.

    ``self`` and ``values`` contiguous, of one of ``DTYPES``, ``values`` shaped
    ``[len(index), *self.shape[1:]]``; ``replay``: a list that receives this call's replay
    (``launch.replay_call``).
    """
    rows, n, D = scatter_shape(self, index, values, partitions, DTYPES, "int_index_add")
    P = partitions
    if n == 0 or rows * D == 0:
        return self.clone()
    adds = _launch(rows, n, D, P)
    buf = _buffer(self, rows, P)
    adds(buf, index, values, n, rows, P)
    if replay is not None:
        go = replay_call((adds, (buf, index, values, n, rows, P)))
        if go is not None:
            replay.append(_replay(go[0], n, rows, P))
    return _summed(self, buf, P)


def _buffer(self: torch.Tensor, rows: int, P: int) -> torch.Tensor:
    """What the atomics add into: a clone of ``self`` (one copy), else ``P`` zeroed copies."""
    if P == 1:
        return self.clone()
    return torch.zeros((P * rows, *self.shape[1:]), device=self.device, dtype=self.dtype)


def _summed(self: torch.Tensor, buf: torch.Tensor, P: int) -> torch.Tensor:
    return buf if P == 1 else self + buf.view(P, *self.shape).sum(0, dtype=self.dtype)


def _replay(adds, n: int, rows: int, P: int):
    """``int_index_add`` of one shape again (see ``replay``)."""

    def again(self, index, values):
        buf = _buffer(self, rows, P)
        adds(buf, index, values, n, rows, P)
        return _summed(self, buf, P)

    return again


@functools.lru_cache(maxsize=1024)
def _launch(rows: int, n: int, D: int, P: int):
    """``_int_adds``' launch for one shape, ``Launcher.prepare``'d. Cached."""
    DP = min(next_pow2(D), MAX_COLUMNS)
    sub = max(1, ELEMENTS // DP)
    wide = max(n, P * rows) * D >= 1 << 31
    return run_adds.prepare((cdiv(n, sub),), WARPS, D=D, DP=DP, SUB=sub, WIDE=wide)
