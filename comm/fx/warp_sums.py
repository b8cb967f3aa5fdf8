"""fp32 atomic adds of 4 elements a lane, summed first across the lanes of a warp that
add to the same 4 addresses (inline PTX: ``match.any.sync``, then a shuffle tree), so
that one lane of each such set adds them, with one ``red.v4`` where aligned.

For contended narrow rows (``scatter_spread``): a warp of 32 rows of which a few output
rows take most cuts its atomics to one a distinct row. NVIDIA sm90 or newer only
(``red.global.add.v4.f32``; ``dispatch.profile.has_warp_sums``); never under
``TRITON_INTERPRET``. Correct whatever layout Triton gives the operands: a lane whose 4
addresses do not follow one another, or with any of its 4 elements masked, adds its own
values, and only lanes whose 4 addresses are all equal are summed together.
"""

import triton
import triton.language as tl

# One tree round on the 4 values: add the values of the next-higher lane still in the set,
# then drop the lanes whose rank's low bit is set (their values now held by a lower lane);
# skipped once no lane of the warp has one left.
_ROUND = ("setp.ne.b32 p, hi, 0; vote.sync.any.pred q, p, -1; @!q bra.uni DONE${:uid}; "
          "neg.s32 t, hi; and.b32 t, hi, t; bfind.u32 src, t; "
          + "".join(f"shfl.sync.idx.b32 y{j}, x{j}, src, 31, -1; " for j in range(4))
          + "".join(f"@p add.f32 x{j}, x{j}, y{j}; " for j in range(4))
          + "and.b32 t, rank, 1; setp.ne.b32 q, t, 0; vote.sync.ballot.b32 b, q, -1; "
          "not.b32 b, b; and.b32 hi, hi, b; shr.u32 rank, rank, 1; ")
# pack=4: $4-$7 the fp32 addresses, $8-$11 to add (0: not), $12-$15 the values; $0-$3
# unused. k: the first address where the 4 follow one another and all are to be added,
# else ~lane (no other lane's); ld: the lowest lane of those with this k.
_ASM = tl.constexpr(
    "{ .reg .pred p, q, e, ld, v; .reg .b32 peers, hi, rank, t, src, b; .reg .b64 k, w; "
    ".reg .f32 x0, x1, x2, x3, y0, y1, y2, y3; "
    + "".join(f"mov.b32 x{j}, ${12 + j}; " for j in range(4))
    + "setp.ne.b32 e, $8, 0; setp.ne.and.b32 e, $9, 0, e; setp.ne.and.b32 e, $10, 0, e; "
    "setp.ne.and.b32 e, $11, 0, e; "
    + "".join(f"add.s64 w, $4, {4 * j}; setp.eq.and.s64 e, ${4 + j}, w, e; "
              for j in range(1, 4))
    + "mov.u32 t, %laneid; cvt.u64.u32 w, t; not.b64 w, w; selp.b64 k, $4, w, e; "
    "match.any.sync.b64 peers, k, -1; mov.u32 t, %lanemask_lt; and.b32 rank, peers, t; "
    "setp.eq.b32 ld, rank, 0; popc.b32 rank, rank; mov.u32 t, %lanemask_gt; "
    "and.b32 hi, peers, t; "
    + _ROUND * 5 + "DONE${:uid}: "
    "and.b64 w, $4, 15; setp.eq.and.b64 v, w, 0, e; and.pred v, v, ld; "
    "@v red.relaxed.gpu.global.add.v4.f32 [$4], {x0, x1, x2, x3}; "
    "not.pred v, v; and.pred v, v, ld; "
    + "".join(f"setp.ne.and.b32 p, ${8 + j}, 0, v; @p red.relaxed.gpu.global.add.f32 "
              f"[${4 + j}], x{j}; " for j in range(4))
    + "".join(f"mov.u32 ${j}, 0; " for j in range(4)) + "}")


@triton.jit
def warp_add(ptr, mask, x):
    """``tl.atomic_add(ptr, x, mask=mask, sem="relaxed")`` on fp32 ``ptr`` (any shape whose
    elements a thread holds come 4 at a time, as ``[rows, 4]`` blocks do), the values of
    one address summed across the warp first."""
    tl.inline_asm_elementwise(_ASM, "=r,=r,=r,=r,l,l,l,l,r,r,r,r,r,r,r,r",
                              [ptr.to(tl.int64, bitcast=True), mask.to(tl.int32),
                               x.to(tl.float32)], dtype=tl.int32, is_pure=False, pack=4)
