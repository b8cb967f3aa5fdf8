"""Atomic adds of value rows for the scatter kernels: four elements an instruction where
the GPU has vector reductions (sm90's ``red.global.add.v4``) and a row's width is a
multiple of four, else one an instruction (``tl.atomic_add``).

Triton emits one ``atom`` an element whatever the layout of the block (Triton 3.6-3.9):
rows of 16 fp32 values take 16 atomic instructions a row. Here the block is split into the
four columns of each group of four (``tl.reshape`` and ``tl.split``: a layout conversion at
most, no assumption on the layout), and each group goes out in one predicated ``red``.
Each element is still added atomically on its own, in fp32 (fp16/bf16 adds as Triton's,
``.noftz``), so the sums are those of the scalar adds, in another order.
"""

import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_vector_atomics

GROUP = 4  # elements a vector reduction


@triton.jit
def _red4(ptr, m, a, b, c, d):
    # one relaxed vector add of (a, b, c, d) at ptr (aligned to four elements) where m
    if a.dtype == tl.float32:
        return tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; "
            "@p red.global.gpu.relaxed.add.v4.f32 [$1], {$3, $4, $5, $6}; } mov.u32 $0, 0;",
            "=r,l,r,f,f,f,f", [ptr.to(tl.int64, bitcast=True), m.to(tl.int32), a, b, c, d],
            dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p red.global.gpu.relaxed.add.noftz.v4." +
            ("bf16" if a.dtype == tl.bfloat16 else "f16") +
            " [$1], {$3, $4, $5, $6}; } mov.u32 $0, 0;",
            "=r,l,r,h,h,h,h", [ptr.to(tl.int64, bitcast=True), m.to(tl.int32),
                               a.to(tl.int16, bitcast=True), b.to(tl.int16, bitcast=True),
                               c.to(tl.int16, bitcast=True), d.to(tl.int16, bitcast=True)],
            dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def add_rows(dst, v, rmask, cols, VEC: tl.constexpr):
    """Add the rows of ``v`` ([R, C], of the output's dtype) at ``dst`` ([R] pointers to each
    row's first element) where ``rmask``, their first ``cols`` columns; relaxed. ``VEC``:
    four columns an instruction (``cols`` a multiple of four, ``dst`` aligned to four
    elements: ``vector``)."""
    R: tl.constexpr = v.shape[0]
    C: tl.constexpr = v.shape[1]
    if VEC:
        g = tl.arange(0, C // 4) * 4
        x = tl.reshape(v, (R, C // 4, 2, 2))
        even, odd = tl.split(x)  # columns 4k + {0, 2}, 4k + {1, 3}
        a, c = tl.split(even)
        b, d = tl.split(odd)
        _red4(dst[:, None] + g[None, :], rmask[:, None] & (g < cols)[None, :], a, b, c, d)
    else:
        k = tl.arange(0, C)
        tl.atomic_add(dst[:, None] + k[None, :], v, mask=rmask[:, None] & (k < cols)[None, :],
                      sem="relaxed")


def vector(width: int, *tensors: torch.Tensor) -> bool:
    """Whether ``add_rows`` may add rows of ``width`` elements four at a time into
    ``tensors`` (the output and the copies it adds into): a GPU with vector reductions, a
    width that is a multiple of four, every tensor aligned to four elements."""
    t = tensors[0]
    return (width >= GROUP and width % GROUP == 0 and has_vector_atomics(t.device) and
            all(x.data_ptr() % (GROUP * x.element_size()) == 0 for x in tensors))
