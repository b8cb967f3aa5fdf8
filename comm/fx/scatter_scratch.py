"""fp32 scratch for the scatter kernels' extra copies, all zero between calls.

A kernel that adds into the first ``k`` elements of ``zeroed(device, k)`` must leave them
zero again before it returns (``scatter_kernels._sum`` stores zeros where it read a copy),
so that no launch has to zero the copies first. One buffer a device and stream: calls on
one stream run in order; calls on two streams never share one (CUDA graphs captured on one
stream share its buffer: replay them in turn, not at once on two streams). A buffer is
never freed (a CUDA graph captured with it keeps its address) until ``release``; a larger
need allocates a larger one, zeroed on the current stream before the kernels that use it.
The copies of a scatter take at most twice its values in fp32
(``scatter_rule.partitions_for``; ``spread_copies``: an eighth of them, and a flag and a
count).
"""

from __future__ import annotations

import torch

_buffers: dict[tuple, torch.Tensor] = {}
_kept: list[torch.Tensor] = []  # buffers outgrown, kept alive for graphs that use them


def _stream_key(device: torch.device) -> tuple:
    if device.type == "cuda":  # the raw stream: no Stream object a call
        index = torch._C._cuda_getDevice() if device.index is None else device.index
        return device.type, index, torch._C._cuda_getCurrentRawStream(index)
    return device.type, device.index, 0


def zeroed(device: torch.device, numel: int) -> torch.Tensor:
    """A view of ``numel`` fp32 zeros (at least one element) that the caller leaves zero."""
    key = _stream_key(device if isinstance(device, torch.device) else torch.device(device))
    buf = _buffers.get(key)
    if buf is None or buf.numel() < numel:
        if buf is not None:
            _kept.append(buf)
        buf = _buffers[key] = torch.zeros(max(1, numel), device=device, dtype=torch.float32)
    return buf[:max(1, numel)]


def release() -> None:
    """Drop every buffer (none may be in use, nor captured in a graph that still replays)."""
    _buffers.clear()
    _kept.clear()
