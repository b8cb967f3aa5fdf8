"""Launching a compiled Triton kernel without Triton's per-call argument binding.

Eager all-reduces are host-bound: Triton's ``kernel[grid](...)`` binds and specialises
every argument on every call. The launchers here compute a small key of exactly what
Triton specialises on for them (dtype, 16-byte alignment of the pointers that vary,
``n == 1`` and ``n % 16``), compile through the normal path on a miss, and afterwards
call the compiled kernel's launcher directly, as Inductor's generated code does.
Only for Triton versions whose launcher signature was checked; others take the normal
path every time.
"""

from __future__ import annotations

import torch
import triton

_CHECKED = ("3.4", "3.5", "3.6")
FAST = ".".join(triton.__version__.split(".")[:2]) in _CHECKED


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (``triton.cdiv`` is a constexpr function: microseconds a call)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Host-side ``triton.next_power_of_2``, without its per-call cost."""
    return 1 << max(0, n - 1).bit_length()


def int_spec(v: int) -> tuple[bool, bool, bool]:
    """What Triton specialises an int argument on: == 1, % 16 == 0, fits in int32."""
    return v == 1, v % 16 == 0, -(1 << 31) <= v < (1 << 31)


class Launcher:
    """One @triton.jit kernel and its compiled variants, keyed by the caller."""

    def __init__(self, fn):
        self.fn = fn
        self.compiled: dict = {}

    def __call__(self, key, grid: int, args: tuple, consts: tuple, warps: int,
                 pdl: bool = False) -> None:
        """``args`` in signature order, then ``consts`` (name, value) pairs in order.

        ``pdl`` launches with programmatic dependent launch (sm90+): the grid may start
        while the kernel before it finishes, so the kernel must ``gdc_wait()`` before it
        touches memory; ``key`` must tell the two apart.
        """
        kernel = self.compiled.get(key) if FAST else None
        if kernel is None or args[0].device.type != "cuda":
            opts = {"launch_pdl": True} if pdl else {}  # callers set pdl only on CUDA
            kernel = self.fn[(grid,)](*args, **dict(consts), num_warps=warps, **opts)
            if FAST and args[0].device.type == "cuda" and kernel is not None:
                self.compiled[key] = kernel
            return
        stream = torch._C._cuda_getCurrentRawStream(args[0].device.index)
        kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                   *args, *(v for _, v in consts))
