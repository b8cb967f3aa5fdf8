"""Who runs an accumulating scatter: the constants and the compile-time rule.

Shared by the pass (``scatter``) and the kernels (``scatter_kernels``), which import this
module and never each other's. The rule reads static shapes only (output rows, row width,
number of indices, value dtype) and answers one of:

- ``commrt``: ``commrt::partitioned_index_put``, whose kernels choose on the GPU, with no
  host sync, between partitioned atomics, combined rows and plain atomics (rows of up to
  ``NARROW_ROW`` elements: ``scatter_narrow``; wider rows: ``scatter_kernels``);
- ``inductor_partitioned``: the graph Inductor's own partitioned scatter builds
  (``torch._inductor.fx_passes.reduced_atomic_contention``), with its partition count;
- ``inductor``: the scatter left as it is, to Inductor's plain atomics.

Rows of up to ``FEW_NARROW`` elements into at most ``FEW_ROWS`` output rows, and of up to
``FEW_WIDTH`` into at most ``FEW_WIDE_ROWS`` (``few_rows``), go to ``scatter_few``, which
sums every output row a program (so do fp32 and bf16 rows of ``FEW_PRODUCTS_ROW`` to
``FEW_PRODUCTS_MAX_ROW`` there, as one-hot products: ``few_products``); single values into
up to ``SHARED_PLANE`` rows (fp32: ``SHARED_WINDOWS`` times that; ``shared_sums``) to
``scatter_shared``, which sums them in shared memory. int32 and int64 values into such
few rows (``few_ints``: histograms, token counts) go to ``scatter_few`` too, summed in
their own dtype; integer rows of ``INT_FLAT_ROW`` elements or more with few indices a copy
(``int_flat``) to ``scatter_ints``' flat adds, one element a thread with no plan; other
int64 values (``int_adds``) to its native 64-bit atomics (torch's, which Inductor calls
for int64, loop on compare-and-swap); other int32 rows of up to ``INT_ROW`` elements
(``int_narrow``; over ``NARROW_ROW``, only with few values a row) to the narrow kernels,
summed in int32; other int32 rows stay with Inductor, whose atomics are the GPU's. Other
narrow rows go to commrt's narrow kernels: whether they contend depends on the indices
(one hot row among a million is as common as a histogram of eight bins), which only the
GPU sees. Two exceptions,
measured: rows of 4 or more (and fp32 1-D values on more than ``HOT`` rows) with
``NARROW_PARTITIONED`` values a row or more (``_HALF`` for fp16/bf16), where Inductor's
partitions won (fp32 rows go to commrt's copy of them, ``spread``: ``scatter_spread``, and
so do fp16/bf16 rows of 4 where Inductor would not partition them), and half-precision
outputs with fewer indices than rows, left to Inductor.
fp32 rows of up to ``ONE_COPY_ROW`` elements with few values a row on a large output
(``one_copy``) go to the narrow kernels with one copy: there the plan hides behind the
copy of the output, and a hot row is found on the GPU; so do fp16/bf16 rows of 4 or more
with a few values a row on a large output (``half_copy``), added in their own dtype;
narrow fp16/bf16 rows with more values a row on one copy are added in their dtype where
the plan finds them uncontended (``own_adds``).
fp32 rows of ``LOCAL_ROW`` to ``LOCAL_MAX_ROW`` elements with a few values a row on a
smaller output (rows over ``LOCAL_WIDE`` also into a few rows: ``local_sums``) go to the
narrow kernels with one copy and no plan, each block summing its rows that share an index
(``local_blocks``: blocks of part of a row where rows are wide); so do bf16 rows over
``LOCAL_WIDE``, added in bf16.
Wide rows go to commrt's kernels where enough values land on each output row to contend
(half-precision rows, which they sum in fp32, from fewer), except on scatters of under
``WIDE_MIN_VALUES`` value elements, where Inductor's partitions won, but for
half-precision rows with a few tens of values a row, which the kernels add in their dtype
where the plan finds few adds an address (``wide_own_adds``); fp32 rows with tens
of values a row and many indices go to them too (a hot row is found on the GPU), from rows
of ``FP32_SPREAD_ROW`` elements with up to ``FP32_MID_VALUES`` value elements a row, and so
do fp16/bf16 rows of ``HALF_SPREAD_ROW`` elements to ``WIDE_ROW`` with as many, summed in
fp32, and of ``HALF_MID_ROW`` to ``WIDE_ROW`` in a bf16 ``index_add`` (aten's kernel, not
Inductor's) from ``HALF_INDEX_ADD_PER_ROW`` values a row; on large
scatters of fp32 rows with over a thousand values a row the plan also looks for a few
distinct rows, which it then sums as products (``wide_hot``);
elsewhere to Inductor: partitioned where every output row takes many values, plain
elsewhere. Where a row's elements cannot pair up in atomics (``half_pairs``: fp16/bf16
rows of an odd width), nothing adds in fp16/bf16: the kernels sum them in fp32, and
Inductor's partitions, which add in the values' dtype, do not get them. fp32 copies keep
four-element atomics on rows of any width (their rows padded: ``copy_stride``).
"""

from __future__ import annotations

import math

import torch

# Run-time rule of the kernels (benchmarks/results/scatter.md): atomic adds one address may
# take before another copy pays, the fewest copies once one is not enough, rows a scatter
# program takes, and the most distinct indices among them for which it sums rows first.
PER_ADDRESS = 512
MIN_COPIES = 16
BLOCK_ROWS = 16
LEADERS = 14
SAMPLE, SHIFTS = 64, 4  # indices sampled (strided), and shifted copies compared with them
# ... and where the plan also chooses whether to add in the output's dtype (wide_own_adds:
# at most WIDE_OWN_ADDS adds an address), OWN_SAMPLE and OWN_SHIFTS: among 256 pairs, one
# equal pair of uniform indices of rows of 100 into 1,024 rows reads as 164 adds an
# address (the fp32 copies), among 1,024 pairs as 41; copies (over PER_ADDRESS adds) take
# four equal pairs of 256 there. On one H200
# (benchmarks/results/probe_wide_plan_NVIDIA_H200.json, 1b86a7c), fp32 rows of 100 into
# 1,024 rows, µs uniform / skewed / hot: 9.7 / 18.1 / 18.4 with 64 x 4, 10.1 / 18.4 / 18.6
# with 128 x 8 (_prepare 1.5 against 1.7), Inductor's plain scatter 9.5 uniform.
OWN_SAMPLE, OWN_SHIFTS = 128, 8
# Narrow rows (scatter_narrow): rows of at most NARROW_ROW elements; up to HOT rows that
# take HOT_MIN of a sample of NARROW_SAMPLE indices and would put over HOT_ADDS adds on each
# copy are summed a block before one add; the rest go to copies where an address expects
# over NARROW_PER_ADDRESS adds; copies at all only from NARROW_COPIES_PER_ROW values a row
# (fewer: no third launch). HOT_ADDS, HOT_SHARE and NARROW_PER_ADDRESS from
# benchmarks/results/scatter_narrow_sweep_NVIDIA_H200.md (bcd6391): rows of a few percent
# each were faster on copies than as hot rows (rows of 16 on 1,024 rows, skewed: 0.025
# against 0.043 ms), and 1-D values on 65,536 rows, skewed, 1.6x faster at 128 adds an
# address than at 1,024.
NARROW_ROW = 16
HOT, HOT_MIN, NARROW_SAMPLE = 16, 4, 64
HOT_ADDS = 1024
HOT_SHARE = 5  # ... or, where they take a fifth of the sample, on one copy
NARROW_PER_ADDRESS = 128
NARROW_COPIES_PER_ROW = 32
# ... int32 rows (int_narrow) from INT_COPIES_PER_ROW: one atomic an element, where fp32 rows
# of 4 take one a row. On one H100, int32 rows of 4 into 65,536 rows (16 a row), skewed,
# took 112.9 µs on one copy against 100.2 for Inductor's partitions
# (benchmarks/results/probe_int32_rows_NVIDIA_H100_80GB_HBM3.json, bb61fb8), and 60.5-66.2
# on up to 16 copies against its 72.9-73.6, uniform 38.2 against 36.8 for its plain scatter
# (scatter_int_grid_NVIDIA_H100_80GB_HBM3.md, ae4012e).
INT_COPIES_PER_ROW = 8
# ... and so do int32 rows of up to INT_ROW elements with fewer than INT_COPIES_PER_ROW
# values a row (one copy), on blocks of one element a thread. On one H100
# (benchmarks/results/probe_int_blocks_NVIDIA_H100_80GB_HBM3.json, 7e9d88d), µs uniform /
# skewed / hot, rows of 1024 into 1,024 rows 18.9 / 19.1 / 27.0 against Inductor's best
# 22.0 / 24.9 / 38.3 (in scatter_int_grid_NVIDIA_H100_80GB_HBM3.md, 61692fb, 19.0 uniform
# against its plain scatter's 15.7: over 1.05x, where hot rows went from 1.41x to 0.71x),
# rows of 100 into 65,536 rows 37.7 / 37.9 / 59.2 against 38.2 / 37.9 / 199.7; with more
# values a row they lost: rows of 100 into 1,024 rows 31.6 / 57.6 / 39.3 on up to 64
# copies against 17.0 / 42.0 / 51.8, rows of 1024 into 8 rows 24.3 against 16.5 uniform
INT_ROW = 1024
# Integer rows of INT_FLAT_ROW elements or more (int_flat) go to scatter_ints'
# int_flat_index_add instead: one value element a thread and no plan, value row j into
# copy j % P, P a power of two up to n / INT_FLAT_INDICES that keeps the copies within
# INT_FLAT_ELEMENTS, and only where a copy takes at most INT_FLAT_MAX indices (a hot row
# half of them: else the narrow kernels, which find it); int32 on one copy only on outputs
# of up to INT_FLAT_ELEMENTS, int64 on up to INT64_FLAT_COPIES. On one H100, µs uniform /
# skewed / hot against Inductor's faster column
# (benchmarks/results/probe_int_copies_NVIDIA_H100_80GB_HBM3.json and the int grid,
# 1f04479): int32 rows of 100 into 1,024 rows on 8 copies 15.8 / 24.1 / 38.4 against
# 17.2 / 36.1 / 47.1 (Inductor's plain scatter 17.2 / 99 / 256, the route before; 16 and
# 32 copies 17.2 and 21.5 uniform), rows of 1024 there on one 14.3 / 14.7 / 26.4 against
# 15.9 / 23.3 / 38.3 (the narrow kernels 19.0 uniform; 4 copies 28-30), int64 rows of 1024
# into 1,024 rows 27.6 / 30.8 / 38.8 against torch's 77.8 / 224.5 / 817.8; but int32 rows
# of 4096 into 1,024 rows on one copy (4M elements) 29.3 against 27.0 uniform, and int64
# rows of 100 into 8 rows on 128 copies 104 against 37.5 for int_adds.
INT_FLAT_ROW = 64
INT_FLAT_INDICES = 512
INT_FLAT_ELEMENTS = 1 << 20
INT_FLAT_MAX = 8192
INT64_FLAT_COPIES = 8
# ... and once on copies, as many as bring the adds an address takes under NARROW_SPREAD, up
# to twice the values a row
# (docs/decisions/2026-11-25-scatter-narrow-copies-more-them-once.md): fp32 values of rows
# of 1 on 65,536 rows, skewed, took 122 µs so against 143 with copies for 128 adds and at
# most the values a row (Inductor's partitions 132), bf16 103 against 148, and 1-D values on
# 1,024 rows, uniform, 59-64 against 74-75; other narrow cells within 5%.
NARROW_SPREAD = 64
# ... estimated, where copies are allowed, also from the pairs of the sample with a second
# strided sample of NARROW_PAIR_SAMPLE indices (at least NARROW_SAMPLE, so that no entry is
# in both). With 64 alone, 90% of 4M indices into 1% of 65,536 rows showed no pair in 19 of
# 200 draws, and one copy took 494 µs where copies took 120 (bf16 rows of 1 in the grid at
# 99ac2a4); with 64 more, in none of 200, for about 1.2 µs a call; with 256, 5-9 µs
# (docs/decisions/2026-11-25-scatter-narrow-copies-more-them-once.md).
NARROW_PAIR_SAMPLE = 64
# ... on outputs of more than NARROW_PAIR_ROWS rows only (pair_sample). On fewer, a
# contended set that 64 random indices are likely to miss (under one pair expected: over
# 1,600 rows for 90% of the indices) holds over a third of the rows, and the estimate's
# floor (an even spread) is within 2.3x of its adds; a contention missed leaves one copy
# only under NARROW_PER_ADDRESS values a row: fewer than 524,288 values. On one H200 the
# second sample cost up to 1.2 µs a call on 8 and 1,024 rows, 0.6-0.8 on rows of 16 into
# 1,024 rows (benchmarks/results/probe_plan_cost_NVIDIA_H200.json). Past 2,048 rows one
# equal pair of uniform indices in the first sample reads as over NARROW_PER_ADDRESS adds
# an address where there are 64: fp32 rows of 16 into 4,096 rows, uniform, took 13.5 µs on
# the 16 copies such a pair chose, 11.0 with the second sample, and into 2,048 rows 12.3 without
# it and 12.8 with it (benchmarks/results/probe_narrow_mid_NVIDIA_H200.json, fbeaa63).
NARROW_PAIR_ROWS = 2048
# fp32 copies of narrow rows of NARROW_PARTITIONED_ROW elements or more: at most
# NARROW_COPY_BYTES of them (but MIN_COPIES; narrow_copies), as _sum reads them all. On
# one H200 (probe_narrow_mid_NVIDIA_H200.json, fbeaa63), µs skewed, 128 / 64 / 32 / 16
# copies: rows of 16 into 2,048 rows 24.1 / 24.8 / 25.9 / 27.8, into 4,096 rows 38.0 /
# 24.3 / 25.1 / 25.1, into 8,192 rows (at most 64) 38.3 / 24.4 / 24.1; rows of 4 into
# 8,192 rows 38.9 / 42.0 / 55.0 / 75.1, into 16,384 rows 54.3 / 38.9 / 39.9 / 47.6
# (Inductor's partitions 20.4 / 23.6 / 31.1 / 37.3 / 42.3). 1-D values gained from 128
# copies into 65,536 rows (NARROW_SPREAD): they keep them.
NARROW_COPY_BYTES = 16 << 20
MAX_PARTITIONS = 128  # as Inductor's pass allows for outputs under 1M elements
MEMORY_FRACTION = 0.05  # of device memory, for commrt's fp32 copies

# Compile-time rule, read from benchmarks/results/scatter_grid_NVIDIA_H200.md (the --force
# column: every scatter to commrt's kernels). fp32: the kernels won on rows of 100 with
# thousands of values a row (and the seed benchmark's 2,000), lost on rows of 1024 with 512
# a row and on narrow rows. bf16: won from 40 values a row on rows of 100 and 1024, and on
# rows of 16 with 32K a row, lost on rows of 16 with 256 a row and with 1024 indices in all
# (64 programs do not fill the GPU).
WIDE_ROW = 64  # elements a row from which commrt's kernels take a row
FP32_CONTENDED = 1024  # values per output row from which they take fp32 rows
HALF_CONTENDED = 32  # ... fp16/bf16 rows of WIDE_ROW or more
# Atomics add fp16/bf16 pairs (``bf16x2``) and fp32 fours (``red.v4``) an instruction only
# where every row starts on 4 and 16 bytes: rows of an even number of fp16/bf16 elements,
# of a multiple of 4 fp32. On one H100 at 06fd582
# (benchmarks/results/scatter_grid_w64_99_NVIDIA_H100_80GB_HBM3.txt, aecb4bd), µs uniform /
# skewed / hot, bf16 rows of 99 added in bf16 took 99 / 33 / 33 into 1,024 rows (rows of
# 100: 8.2 / 16.0 / 16.8) and 65 / 169 / 50 into 65,536 rows (10.4 / 11.1 / 24.0), and
# Inductor's bf16 index_put of them 121 µs into 1,024 rows (7.3); fp32 rows of 99 on the
# wide kernels into 1,024 rows 19 / 33 / 32 (9.6 / 17.5 / 17.8) against Inductor's
# partitions' 18 / 25 / 28. So fp16/bf16 rows of an odd width are summed in fp32. The wide
# kernels' fp32 copies now pad their rows to 16 bytes (scatter_kernels.copy_stride): on one
# H100 at 3e1d477 (benchmarks/results/probe_pad_rows_NVIDIA_H100_80GB_HBM3.json) fp32 rows
# of 99 into 1,024 rows took 11.8 / 18.8 / 19.0 µs so, against 19.7 / 32.6 / 32.8 with rows
# D apart, Inductor's plain scatter 12.0 / 59.2 / 143 and its partitions 22.1 / 27.7 / 33.2
# (bf16 rows of 99, summed in fp32, 11.3 / 17.3 against 21.0 / 32.5 uniform / skewed). So
# fp32 rows of any width go where rows of a multiple of 4 go.
HALF_PAIR = 2  # elements a row must be a multiple of (half_pairs)
HALF_ROW, HALF_NARROW_CONTENDED = 16, 2048  # ... fp16/bf16 rows of 16 to WIDE_ROW
MIN_INDICES = 4096  # fewer indices leave the GPU idle (16 rows a program)
# From the grid at c636681 (every cell 4M value elements): Inductor's partitions beat the
# kernels on crowded wide rows there (fp32 rows of 100 on 8 rows, bf16 index_put of rows of
# 100 and 1024), which the kernels beat on the seed benchmark's 100M (scatter.md);
# on fp32 rows of 100 with 41 a row the kernels' hot rows won 1.3-2.3x where one row was
# hot, and lost 1.35x on uniform indices, where Inductor's plain scatter lost 2-4.6x on hot;
# with under one a row (65,536 rows, at 8e8c16a) they lost 1.2x on uniform and skewed
# indices and won 3.5x on a hot row: left to Inductor, as uniform indices are the common case.
WIDE_MIN_VALUES = 1 << 24  # value elements from which the kernels take crowded wide rows
FP32_SPREAD_INDICES = 16384  # fp32 wide rows with up to INDUCTOR_CONTENDED a row:
FP32_SPREAD_PER_ROW = 16  # ... to the kernels from this many indices and values a row
INDUCTOR_CONTENDED = 64  # values per output row from which Inductor's partitions pay
# (an index_put of fp32 rows of 64 with 64 a row into 1,024 rows, on one H100 at 1a487d8,
# µs uniform / skewed / hot: the wide kernels 9.8 / 15.1 / 15.7, Inductor's partitions
# 13.4 / 15.3 / 22.6, its plain scatter 9.7 / 59.6 / 158: the `commrt kernels` column of
# benchmarks/results/scatter_grid_w64_99_NVIDIA_H100_80GB_HBM3.md, fce03c0, in git)
# ... from rows of FP32_SPREAD_ROW elements: on one H100 at 6b9fa1e, into 1,024 rows, µs
# uniform / skewed / hot, an index_put on the wide kernels (the `commrt kernels` column,
# the route these rows now take) of rows of 40 11.4 / 20.7 / 21.2 against Inductor's faster
# scatter's 10.5 / 20.5 / 23.0 (its partitions, which took these rows before, 15.9 / 20.5 /
# 23.0), rows of 50 12.1 / 17.3 / 17.8 against 12.2 / 25.6 / 24.6, rows of 56 10.1 / 16.7 /
# 17.2 against 10.3 / 21.4 / 22.3; rows of 32 12.8 / 20.3 / 20.1 against 9.7 / 17.8 / 20.9,
# left to Inductor (benchmarks/results/scatter_grid_w40_56_rows1024_NVIDIA_H100_80GB_HBM3.md
# at 6b9fa1e, in git; scatter_grid_w32_50_NVIDIA_H100_80GB_HBM3.md), each with 4,096 value
# elements a row (FP32_MID_VALUES, at most, for rows under WIDE_ROW)
FP32_SPREAD_ROW, FP32_MID_VALUES = 40, 4096
# fp16/bf16 rows of HALF_MID_ROW to WIDE_ROW elements (below HALF_NARROW_CONTENDED a row):
# on one H100 at 6735783, into 1,024 rows, µs uniform / skewed / hot, the wide kernels
# summing bf16 rows in fp32 (the `commrt kernels` column) took rows of 40 12.1 / 21.4 / 21.3
# against Inductor's faster scatter's 8.4 / 21.5 / 17.1, rows of 50 11.9 / 16.7 / 16.1
# against 13.4 / 21.2 / 22.1 (at 6b9fa1e 11.9 / 16.8 / 16.7 against 8.6 / 20.5 / 21.8),
# rows of 56 11.8 / 16.8 / 17.0 against 7.7 / 22.7 / 19.4 (Inductor's partitions, which
# took these rows, 13.2-15.0 uniform; at 6b9fa1e rows of 32 12.6 / 18.4 / 18.4 against its
# partitions' 10.5 / 14.7 / 14.1). Inductor's partitions of bf16 rows of 40 ran at another
# speed each compile (autotuned configs): in five compiles on an H100 and an H200, 12.0-34.3 /
# 20.6-42.9 / 16.1-41.6, medians 13.7 / 25.6 / 23.0, against the kernels' 11.9-12.2 /
# 21.4-21.8 / 21.3-21.5 (scatter_grid_w32_56_half_NVIDIA_H100_80GB_HBM3.md, 94df385;
# scatter_grid_w32_56_half_NVIDIA_H200.md, 5756285); on rows of 32 their medians, 11.5 /
# 16.5 / 17.7, beat the kernels' 12.5-12.7 / 18.4-18.5 / 18.2-18.5. So an index_put or a
# scatter_add goes to the kernels from rows of HALF_SPREAD_ROW,
# with the fp32 rows' window of values a row. A bf16 index_add, which Inductor leaves to
# aten's kernel, took 31.7-32.7 / 213-305 / 291-367 µs there (rows of 40 to 56) against
# the kernels' 11.7-12.1 / 16.6-21.5 / 16.6-21.4, rows of 32 31.9 / 185 / 237 against 12.6 /
# 18.5 / 18.2, and into 65,536 rows (2 values a row) 33.8 / 34.0 / 239 against 19.2 / 19.0 /
# 41.8: it goes to them from rows of HALF_MID_ROW with HALF_INDEX_ADD_PER_ROW values a row
# (with a few a row on MID_COPY_PLANE output elements or more, to one copy: half_copy)
# (benchmarks/results/scatter_grid_w40_56_rows1024_NVIDIA_H100_80GB_HBM3.md, 6735783;
# scatter_grid_w32_50_NVIDIA_H100_80GB_HBM3.md, 6b9fa1e)
HALF_MID_ROW, HALF_SPREAD_ROW, HALF_INDEX_ADD_PER_ROW = 32, 40, 2
# Narrow rows that commrt leaves to Inductor (benchmarks/results/scatter_grid_NVIDIA_H200.md,
# 06eb09f and 544ae5e): Inductor's partitions won every cell of rows of 4 and 16 with 1,024
# values a row or more (bf16: 256), and of fp32 1-D values on 1,024 rows; commrt's hot rows
# won 1-D values on 8 rows, and fp32 rows of 16 with 256 a row (Inductor's partitions, as
# this pass inlines them, were 7x slower there). Half-precision outputs with more rows than
# indices: commrt's fp32 copy of the output (two passes over it) cost more than Inductor's
# scatter saved.
NARROW_PARTITIONED, NARROW_PARTITIONED_HALF = 1024, 256  # values per output row
NARROW_PARTITIONED_ROW = 4  # from this row width, or fp32 on more than HOT rows
# ... of those, fp32 rows go to commrt's copy of Inductor's partitions (spread:
# scatter_spread, Inductor's partition count of fp32 copies, a block's rows summed first
# where SPREAD_HOT_MIN of its rows hit one of SPREAD_HOT candidates): Inductor's autotuner
# draws one of two configs, the slower up to 18% slower. On one H100
# (benchmarks/results/probe_spread_NVIDIA_H100_80GB_HBM3.json, 93b0b4a), µs uniform /
# skewed / one hot row, against Inductor's partitions at their faster config: rows of 4
# into 1,024 rows 19.1 / 26.2 / 16.3 against 19.3 / 29.7 / 25.1 (the narrow kernels 21.6 /
# 31.7 / 14.8), rows of 16 into 8 rows 12.6 / 10.5 / 10.5 against 12.5 / 18.7 / 16.0; on
# one H200 (_NVIDIA_H200.json, f0bd61e) 16.5 / 27.2 / 14.9 against 16.4 / 29.6 / 22.9 and
# 12.5 / 10.4 / 10.4 against 12.2 / 15.2 / 13.9. There (fe1ff21: the file at 93b0b4a)
# fp16/bf16 rows lost 6% in element-wise blocks (Inductor's partitions add in their
# dtype) and wide rows 24-84%: those stay with Inductor.
SPREAD_HOT, SPREAD_HOT_MIN = 2, 16
# ... where the GPU sums a warp's values of one row before one atomic (fx.warp_sums, sm90+),
# rows of SPREAD_BUSY_ROW: a candidate's rows summed from SPREAD_BUSY_HOT_MIN of a block's
# 256 (a quarter), and a block where SPREAD_BUSY to SPREAD_BUSY_HOT_MIN - 1 of them hit a
# candidate (a few rows take most) adds its other rows to one copy through the warp sums.
# On one H200 (benchmarks/results/probe_spread_match_NVIDIA_H200.json, 09bb6d8), fp32 rows
# of 4 into 1,024 rows, µs uniform / skewed / hot: 16.73 / 15.53 / 14.87 against 16.53 /
# 29.30 / 14.73 without (Inductor's partitions 19.60 / 34.24 / 27.64 in that run; its
# faster config 16.4 on uniform indices in others). Rows of 16 lost (hot 16.47 against
# 13.41 without).
SPREAD_BUSY_ROW, SPREAD_BUSY, SPREAD_BUSY_HOT_MIN = 4, 8, 64
# ... and fp16/bf16 rows of SPREAD_BUSY_ROW where no compiled column partitions the
# scatter (a scatter_add, whose compiled column is Inductor's plain scatter; an index_add,
# aten's kernel): on one H200, rows of 4 into 1,024 rows, µs uniform / skewed / hot, the
# spread's fp32 copies with the warp sums took, bf16, 16.6 / 15.5 / 15.2
# (benchmarks/results/probe_spread_half_NVIDIA_H200.json, 61d6dba) against Inductor's
# partitions inlined for a scatter_add, 15.1 / 34.5 / 23.2 (errors to 5.6e-2 against
# 1.7e-3; scatter_add_grid_NVIDIA_H200.md, f99e8f9), and the narrow kernels' 17.4 / 32.3 /
# 13.4 for an index_add (scatter_grid_NVIDIA_H200.md, a7b340c); fp16, 16.6 / 15.5 / 14.7
# against 15.6 / 34.0 / 24.1 and 18.5 / 35.5 / 13.1 (errors 1.7-2.1e-4 against 5.3e-4 to
# 4.3e-3; probe_spread_fp16_NVIDIA_H200.json, c198a49). An index_put keeps Inductor's
# partitions: they are its compiled column (bf16 15.4 uniform).
SPREAD_HALF = (torch.float16, torch.bfloat16)
INDUCTOR_MIN_INDICES = 4096  # Inductor's partitioned_scatter_min_index_size
INDUCTOR_MEMORY = 0.10  # Inductor's partitioned_scatter_memory_budget
# fp32 rows wider than NARROW_ROW that the narrow kernels take with one copy (one_copy):
# under FP32_SPREAD_PER_ROW values a row, outputs of ONE_COPY_PLANE elements or more, rows
# of up to ONE_COPY_ROW. Measured on one H200 against Inductor
# (docs/decisions/2026-11-25-scatter-fp32-rows-up-1-024.md): rows of 64 and 100 on 65,536
# rows ran 0.88-0.98x its plain scatter uniform and skewed and 0.18-0.32x its partitions
# with one hot row; rows of 1024 on 65,536 rows 1.00x and 0.88x; rows of 1024 on 1,024 rows
# (1M elements) 1.08-1.17x: the plan no longer hides behind the copy.
ONE_COPY_ROW, ONE_COPY_PLANE = 1024, 1 << 22
# ... their hot rows: up to ONE_COPY_HOT rows that take ONE_COPY_HOT_MIN of NARROW_SAMPLE (a
# quarter): with ten rows of 9% each, rows of 100 on 65,536 rows took 138 µs as ten hot
# rows, 49 µs with none, Inductor's scatter 46 µs
# (docs/decisions/2026-11-25-scatter-fp32-rows-up-1-024.md).
ONE_COPY_HOT, ONE_COPY_HOT_MIN = 4, 16
# ... and rows wider than NARROW_ROW and under WIDE_ROW (one_copy's and half_copy's) from
# outputs of MID_COPY_PLANE elements (copy_plane). Inductor's plain scatter, their route
# before, is slow on a hot row: on one H100, rows of 32 to 56 into 65,536 rows (4M values),
# µs uniform / hot,
# bf16 index_put 8.6-14.1 / 101-250, scatter_add 8.6-139 / 101-2,379,655 (a 2.4 s call:
# rows of 32), aten's index_add 33-35 / 240-369
# (benchmarks/results/scatter_grid_w32_56_half_NVIDIA_H100_80GB_HBM3.md, 94df385); fp32
# rows of 32 and 50 12.8-20.2 / 161-163 (scatter_grid_w32_50_NVIDIA_H100_80GB_HBM3.md,
# 6b9fa1e). On one copy, on one H100 at 32997b6, µs uniform / skewed / hot against
# Inductor's faster column: bf16 index_put and scatter_add 7.1-9.5 / 9.2-10.2 / 12.4-18.7
# against 7.0-12.5 / 9.5-13.5 / 45-187 (0.75-1.04x uniform and skewed), index_add 7.1-18.6
# against aten's 34-369; fp32 11.7-20.0 / 14.3-21.9 / 12.1-22.8 against 13.4-23.3 /
# 15.2-25.8 / 86-208 (0.77-0.96x, hot 0.06-0.21x)
# (benchmarks/results/scatter_grid_w32_56_half_NVIDIA_H100_80GB_HBM3.md and
# scatter_grid_w32_56_rows65536_fp32_NVIDIA_H100_80GB_HBM3.md).
MID_COPY_PLANE = 1 << 21
# fp32 rows of LOCAL_ROW to LOCAL_MAX_ROW elements with at most LOCAL_PER_ROW values a row
# on outputs under ONE_COPY_PLANE (local_sums): the narrow kernels with one copy and no plan
# (it no longer hides behind the copy of a small output), each block summing the rows that
# share an index, where LOCAL_MIN of them do, and adding each sum once. On one H200 (whole
# rows of 16 a block on rows of over 128;
# docs/decisions/2026-11-25-scatter-fp32-rows-65-256-few.md), index_put, µs with uniform /
# skewed / one hot row, against Inductor's plain scatter in the same run: rows of 256 into
# 1,024 rows 8.5 / 19.8 / 16.1 against 8.1 / 21.4 / 82.2 (commrt's wide kernels 12.5 / 23.1
# / 23.3); rows of 100 into 4,096 rows 8.6 / 17.8 / 19.6 against 9.1 / 18.3 / 117.6, into
# 16,384 rows 9.8 / 11.9 / 21.0 against 9.9 / 11.9 / 112.3. Left where they were: rows of
# 100 into 1,024 rows (41 a row, skewed: 54 against 47, the wide kernels 20). Fewer sharing
# rows (2, 3 on blocks of 32) cost more.
LOCAL_ROW, LOCAL_PER_ROW = 65, 16
LOCAL_MIN = 4
# ... and rows of over LOCAL_WIDE to LOCAL_MAX_ROW elements, also into at most
# LOCAL_FEW_ROWS rows (a block of 32 rows holds LOCAL_MIN of each, whatever the values a
# row), in blocks of LOCAL_COLUMNS columns of 32 rows on LOCAL_WARPS warps (LOCAL_FEW_WARPS
# into few rows), a row's blocks launched one after another. On one H200 and one H100
# (benchmarks/results/probe_local_columns_NVIDIA_H200.json, _NVIDIA_H100_80GB_HBM3.json,
# 5039f88), µs uniform / skewed / one hot row, against the faster of Inductor's scatters:
# rows of 1024 into 1,024 rows 8.9 / 12.3 / 8.8 against 8.6 / 13.1 / 23.9 (H100 10.0 /
# 13.1 / 9.4 against 10.2 / 14.4 / 22.8; whole rows of 16 a block: 10.0 / 11.7 / 9.6),
# into 8 rows 8.7 / 6.6 / 8.5 against 10.6 / 14.2 / 12.3 (H100 9.0 / 7.0 / 7.8 against 9.8
# / 12.1 / 11.9); rows of 256 into 1,024 rows 8.8 / 15.6 / 11.0 against 8.1 / 15.3 / 27.2
# (whole rows: 8.4 / 19.8 / 16.0; H100 9.8 / 16.0 / 11.2 against 9.1 / 15.1 / 32.2). 4
# warps were faster uniform and 1.5x slower skewed. As an index_put, fp16/bf16 rows of
# 1024 lost uniform (H100: 6.7 µs at best against 6.2) and stay with Inductor.
LOCAL_WIDE, LOCAL_MAX_ROW, LOCAL_FEW_ROWS = 128, 1024, 8
LOCAL_COLUMNS, LOCAL_WARPS, LOCAL_FEW_WARPS = 128, 2, 1
# ... and bf16 rows of over LOCAL_WIDE elements with a few values a row, added in bf16 on
# LOCAL_HALF_WARPS: in the probe above, µs uniform / skewed / one hot row, 6.6 / 8.2 / 6.8
# on one H200 and 7.3 / 8.7 / 7.5 on one H100 (2 warps: 13.2 skewed; 4: 89), against aten's
# 33-51 µs for an index_add (Inductor keeps a bf16 index_add as aten's kernel). An
# index_put too: Inductor's plain scatter took 5.8 / 10.6 / 23.4 there, its partitions
# 9.2 / 11.1 / 17.4 (the grid at fa56ae0); in benchmarks/results/probe_half_wide_NVIDIA_H200.json
# (f26665b) these blocks took 6.5 / 9.3 / 6.9, the same blocks without the sums 5.8
# uniform; comparing a block's indices before waiting for _init (local_early), 5.7 / 8.5 /
# 6.3 (probe_local_early_NVIDIA_H200.json, 3d8743a), and in the grid at 518175c 5.8 / 7.4
# / 6.1 against Inductor's best 5.7 / 8.0 / 17.3.
LOCAL_HALF_WARPS = 1
# Narrow rows into few output rows (few_rows: scatter_few, every row summed a program, no
# atomics): rows of up to FEW_NARROW elements into up to FEW_ROWS rows, of up to FEW_WIDTH
# into up to FEW_WIDE_ROWS. On one H200, 4M value elements, µs uniform, selects against
# Inductor's partitions (benchmarks/results/probe_few_launch_NVIDIA_H200.json, 3a619f3):
# into 8 rows, fp32 rows of 16 9.6 against 12.2 (scatter_spread, the rule's choice
# before, 13.2; with one row hot 9.6 against its 10.5), bf16 10.1 against 11.7, rows of 4
# 10.1 against 37.9, 1-D values 18.4 against 371; into 16 rows, rows of 4 14.2 against
# 34.6, rows of 8 14.9 against 15.2 (14.6 in a run at 6ea0220), and rows of 16 18.1
# against 12.4 (probe_few_total_NVIDIA_H200.json, 9c6b31d): rows wider than 4 into more
# than 8 rows stay with scatter_spread.
FEW_ROWS, FEW_NARROW = 16, 4
FEW_WIDE_ROWS, FEW_WIDTH = 8, 16
# The integer values commrt's kernels take: into few rows (few_ints) the selects in the
# values' dtype, other int64 (int_adds) native 64-bit atomics; both exact, as the plain
# op's sums are (benchmarks/results/scatter_int_grid_*.md, 2026-12-06).
INT_DTYPES = (torch.int32, torch.int64)
# fp32 and bf16 rows of FEW_PRODUCTS_ROW to FEW_PRODUCTS_MAX_ROW elements into at most
# FEW_ROWS rows (few_products: scatter_few's one-hot products on tensor cores, a partial a
# program, no atomics). On one H200 (benchmarks/results/probe_few_sums_NVIDIA_H200.json,
# 140b457), 4M fp32 values of rows of 100 into 8 rows, µs uniform / skewed: 9.95 / 9.93
# against 11.28 / 13.03 for Inductor's partitions (the rule's choice before) and 63.5 /
# 211 for its plain scatter; rows of 16 lost there (17.4 against 12.4), and rows of 1024
# (14.0 against 7.9 for commrt's block-local sums). As shipped (an index out of range or a
# sum that is not finite checked once a program), in the grid at 54e2f3f
# (benchmarks/results/scatter_grid_NVIDIA_H200.md), µs uniform / skewed / hot, fp32
# index_put 11.2 / 11.2 / 11.1 against Inductor's best 10.8 / 13.7 / 11.6, bf16 index_put
# 9.1 / 9.0 / 9.0 against its partitions' 8.3 / 10.0 / 9.0 (bf16 index_add 9.2, 15.4 on
# the wide kernels before). Errors against float64: fp32 4-7e-7 (Inductor's plain scatter
# 1.3-3.2e-6, its partitions 1.4-3.0e-7: the products' fp32 sums on tensor cores are not
# correctly rounded), bf16 1.6e-3 (its partitions, adding in bf16, 0.9-2e-2). From
# WIDE_MIN_VALUES value elements (not measured) rows stay with the wide kernels.
FEW_PRODUCTS_ROW, FEW_PRODUCTS_MAX_ROW = 65, 128
FEW_PRODUCTS_DTYPES = (torch.float32, torch.bfloat16)
# fp16/bf16 rows of FEW_HALF_PRODUCTS_ROW elements or more into a few rows (few_rows, and
# few_products' wider rows) as one-hot products in their own dtype on a GPU
# (few_half_products; exact: a one-hot row times a value), not selects or tf32 products.
# On one H200, 4M values into 8 rows, uniform: rows of 16, bf16 7.0 µs against 10.1 for
# the selects, fp16 7.0 against 9.9, Inductor's partitions 11.8; bf16 rows of 100 6.1
# against 6.8 in tf32 (benchmarks/results/probe_few_products_NVIDIA_H200.json, c3e3124);
# fp32 rows of 16 lost as tf32 products (16.8 against 9.6 at b3f6ae6, that file in git).
# Rows of 9 to 15 share the 16-column tile (not measured); narrower rows would pad it.
FEW_HALF_PRODUCTS_ROW = 9
# fp16/bf16 narrow rows with one copy (half_adds): rows of HALF_ADDS_ROW elements or more,
# with at most HALF_ADDS_PER_ROW values a row, add in the output's dtype (as Inductor's
# scatter does; hot rows still summed in fp32), not in an fp32 copy converted at the end.
# Measured on one H200 against the fp32 copy
# (docs/decisions/2026-11-25-scatter-half-precision-rows-added-their.md): bf16 rows of 4 on
# 1M rows (1 a row) 16.6 against 27.6 µs uniform, rows of 16 on 65,536 rows (4 a row) 8.4
# against 13.2 uniform and 12.0 against 17.9 skewed; but rows of 4 on 65,536 rows (16 a
# row), skewed (about 1,400 adds an address), 70 against 49; 1-D values lost 2.3-12x (one
# bf16 add an element, contended).
HALF_ADDS_ROW, HALF_ADDS_PER_ROW = 4, 8
# ... and past HALF_ADDS_PER_ROW, narrow fp16/bf16 rows of HALF_ADDS_ROW or more on one copy
# (under NARROW_COPIES_PER_ROW values a row) on outputs under OWN_ADDS_PLANE elements
# (own_adds): the plan adds them in their dtype where it finds no hot row and at most
# OWN_ADDS adds an address, else through the fp32 copy (_sum then a no-op launch; _init
# copies self into both). On one H200 (benchmarks/results/probe_half_switch_NVIDIA_H200.json,
# fac8fb8), µs uniform, this choice against the fp32 copy alone, bf16 adds alone and
# Inductor's plain scatter: bf16 rows of 4 into 65,536 rows 16.0 against 16.3, 15.0 and
# 14.5, rows of 16 into 16,384 rows 8.3 against 11.1, 7.3 and 6.8 (fp16 alike; the no-op
# _sum launch 0.6-0.7 µs of the gap); skewed and one hot row 0.3-1.0 µs slower than the
# fp32 copy alone, where fp16 adds took 81 µs against 49. One equal pair in the plan's
# samples does not count toward this choice: it put 1M uniform indices into 65,536 rows
# on the fp32 copy in about 1 index set in 11, among them the grid's bf16 rows of 4 (16.4
# µs so, 15.2 without it: benchmarks/results/probe_grid_gap_first_NVIDIA_H200.json,
# ddb1ea5, and probe_grid_gap_NVIDIA_H200.json, ea45913).
OWN_ADDS, OWN_ADDS_PLANE = 32, 1 << 22
# fp16/bf16 rows of WIDE_ROW or more with up to WIDE_OWN_PER_ROW values a row on commrt's
# wide kernels (wide_own_adds): added in the output's dtype where the plan expects at most
# WIDE_OWN_ADDS adds an address (as Inductor's plain scatter does), else through the fp32
# copies; with HALF_CONTENDED a row or more, an index_put under WIDE_MIN_VALUES value
# elements goes to them too, not to Inductor's partitions. On one H200
# (benchmarks/results/probe_half_wide_NVIDIA_H200.json, f26665b), bf16 rows of 100 into
# 1,024 rows, µs uniform / skewed / one hot row: 8.6 / 17.2 / 17.3; without the choice
# 10.6 / 16.8 / 17.0; Inductor's plain scatter 6.4 / 49.3 / 77.5, its partitions (the
# rule's choice before) 11.2 / 15.3 / 17.9 in the grid at fa56ae0 and 18.8 / 20.4 / - in
# the probe (its autotuner draws). WIDE_OWN_ADDS at twice WIDE_OWN_PER_ROW: the plan's
# sample of 1,024 pairs sees about one equal pair where the indices are uniform.
WIDE_OWN_ADDS, WIDE_OWN_PER_ROW = 128, 64
# fp32 rows of WIDE_ROW or more with WIDE_HOT_PER_ROW values a row or more on scatters of
# WIDE_HOT_VALUES value elements or more (wide_hot; the seed benchmark's shape: 1,996 a row,
# 100M values): the wide kernels' plan also looks for at most WIDE_HOT distinct rows in a
# strided sample of WIDE_HOT_SAMPLE indices, and where it finds no more, _hot sums each
# program's values of them as one-hot products into a partial it adds once. On one H200, one
# scatter of that shape with indices from 0..k took 178-180 µs at k = 0 and 31 against
# 246-257 without and Inductor's partitions' 245-300; where the sample holds more rows, the
# plan costs 4-5 µs, its quick check saying no (k = 63: 217.5 against 212.4; k = 500: 200.1
# against 196.3) (benchmarks/results/probe_seed_hot_NVIDIA_H200.json, 7cb0938; about 12 µs
# before the quick check, at 5147216:
# docs/decisions/2026-12-04-scatter-hot-rows-products-seed-benchmark.md).
WIDE_HOT, WIDE_HOT_PER_ROW, WIDE_HOT_VALUES = 32, 1024, 1 << 24
WIDE_HOT_SAMPLE = 512  # strided indices the plan reads for them
# ... and so, with hot rows as ``one_copy``'s, rows of up to ONE_COPY_ROW on outputs of
# ONE_COPY_PLANE elements or more (half_copy), fewer indices than rows included: there is no
# fp32 copy of the output, and the plan hides behind the copy of it. On one H200
# (docs/decisions/2026-11-25-scatter-half-precision-rows-few-values.md), against Inductor's
# index_put: bf16 rows of 16 into 1M rows 23.4 against 24.3 µs uniform, 27.7 against 283
# with one row hot; rows of 100 into 65,536 rows 8.9 against 9.6 and 23.0 against 81.5; rows
# of 1024 into 65,536 rows 73.6 against 72.3 and 77.7 against 89.9. Inductor keeps bf16's
# index_add as aten's kernel, which took 0.10-0.52 ms there (scatter_grid at 4a6025b). 1-D
# values (and rows of 1) into more than FEW_ROWS and at most SHARED_PLANE rows (shared_sums:
# scatter_shared, every output element summed in shared memory a program): on one H200 into
# 1,024 rows, fp32, 28 µs uniform and 27 with a hot row, against Inductor's partitions' 54
# and 85 (scatter_grid_NVIDIA_H200.md, 4a6025b); against the narrow kernels, 4M values into
# 32 to 16,384 rows: 23-56 µs, against 33-134 (16,384 rows uniform: 52.7 against 58.9;
# docs/decisions/2026-11-25-scatter-single-values-into-up-16.md). Wider rows lost there:
# Hopper adds fp32 in shared memory with a compare-and-swap loop, about one element a cycle
# an SM, where L2's atomics add a row of 16 in one (rows of 4 into 1,024 rows: 32-41 µs,
# Inductor's partitions 16-28; rows of 16 into 8 rows: 15-22 µs against 12-15). Up to 32,768
# rows (one program an SM on 16 warps past 16,384), against Inductor's best of its two
# scatters, on one H200: 56.6 / 57.7 / 53.9 µs uniform / skewed / hot against 64.1 / 112.6 /
# 106.3, where the narrow kernels took 69.8 / 122.1 / 41.1. Into 65,536 rows, in two windows
# of rows whose programs each read every index, they lost uniform and hot (88 and 83 µs
# against 55 and 36 for the narrow kernels; skewed 88 against 123)
# (benchmarks/results/probe_shared_windows_NVIDIA_H200.json).
SHARED_PLANE = 32768
# fp32 single values into up to SHARED_WINDOWS * SHARED_PLANE rows: summed in windows of
# SHARED_PLANE rows, each program adding its non-zero sums to the output with atomics (a
# warp's on one line) instead of storing a partial. On one H200, 4M values into 65,536
# rows, µs uniform / skewed / hot: 54.1 / 50.5 / 47.7
# (benchmarks/results/probe_window_flush_sums_NVIDIA_H200.json, e26c5bc); in the probe's
# run, Inductor's best 53.5 / 128.8 / 155.6 and the narrow kernels' 54.7 / 125.1 / 35.8,
# and into 131,072 rows (four windows) 90 / 78 / 82 against Inductor's 52 / 129 / 222
# (benchmarks/results/probe_window_flush_NVIDIA_H200.json, 29b7fc2).
SHARED_WINDOWS = 2

COMMRT, INDUCTOR_PARTITIONED, INDUCTOR = "commrt", "inductor_partitioned", "inductor"
HALF = (torch.float16, torch.bfloat16)
NARROW_DTYPES = (torch.float32, *HALF)


def decide(rows: int, width: int, n: int, dtype: torch.dtype, index_put: bool = True,
           partitioned: bool | None = None) -> tuple[str, str]:
    """``(choice, reason)`` for ``n`` values of ``width`` elements into ``rows`` rows.

    ``index_put``: Inductor lowers the node to its atomic scatter (an ``index_put``, or a
    ``scatter_add``), not to aten's kernel (a bf16 ``index_add``); ``partitioned``:
    Inductor's own partitioned scatter may take it (an ``index_put``, not a
    ``scatter_add``; None: as ``index_put``).
    """
    if partitioned is None:
        partitioned = index_put
    per_row = n / max(1, rows)
    if few_products(rows, width, n, dtype):
        return COMMRT, (f"{dtype} rows of {width} into {rows} rows: one-hot products, a "
                        "partial a program")
    if few_ints(rows, width, n, dtype):
        return COMMRT, (f"{dtype} rows of {width} into {rows} rows: each summed a program, "
                        "exactly")
    if p := int_flat(rows, width, n, dtype):
        return COMMRT, (f"{dtype} rows of {width}, {per_row:.0f} values a row: one element "
                        f"a thread into {p} {'copy' if p == 1 else 'copies'}, no plan")
    if int_adds(rows, width, n, dtype):
        return COMMRT, (f"{dtype} rows of {width}, {per_row:.0f} values a row: native "
                        "64-bit atomics")
    if int_narrow(rows, width, n, dtype):
        return COMMRT, (f"{dtype} narrow rows of {width}, {per_row:.0f} values a row: hot "
                        "rows and copies chosen on the GPU, summed in int32")
    if dtype in NARROW_DTYPES and width <= NARROW_ROW and n >= MIN_INDICES:
        if few_rows(rows, width):
            return COMMRT, f"rows of {width} into {rows} rows: each summed a program"
        if shared_sums(rows, width, n, dtype):
            return COMMRT, f"single values into {rows} rows: summed in shared memory"
        if dtype in HALF and n < rows and not half_copy(rows, width, n, dtype):
            return INDUCTOR, (f"{dtype} rows of {width}, fewer indices than rows: an fp32 copy "
                              "of the output costs more than the scatter")
        if spread(rows, width, n, dtype, half=not partitioned):
            return COMMRT, (f"narrow rows of {width}, {per_row:.0f} values a row: Inductor's "
                            "partitions in fp32 copies, a block's hot rows summed first")
        if dtype in HALF and index_put and per_row >= NARROW_PARTITIONED_HALF and \
                width >= NARROW_PARTITIONED_ROW:  # fp32 rows: spread
            return INDUCTOR_PARTITIONED, (f"narrow rows of {width}, {per_row:.0f} values a "
                                          "row: Inductor's partitions")
        return COMMRT, (f"narrow rows of {width}, {per_row:.0f} values a row: hot rows and "
                        "copies chosen on the GPU")
    if local_sums(rows, width, n, dtype):
        return COMMRT, (f"rows of {width}, {per_row:.2g} values a row on {rows * width} "
                        "output elements: one copy, the rows of a block that share an index "
                        "summed")
    if one_copy(rows, width, n, dtype):
        return COMMRT, (f"rows of {width}, {per_row:.2g} values a row on {rows * width} "
                        "output elements: one copy, hot rows found on the GPU")
    if half_copy(rows, width, n, dtype):
        adds = f"added in {dtype}" if half_pairs(width) else "summed in fp32"
        return COMMRT, (f"{dtype} rows of {width}, {per_row:.2g} values a row on "
                        f"{rows * width} output elements: one copy, {adds}, hot rows found "
                        "on the GPU")
    if dtype.is_floating_point and n >= MIN_INDICES:
        small = n * width < WIDE_MIN_VALUES  # Inductor's partitions win where they apply
        if dtype in HALF and (width >= WIDE_ROW and per_row >= HALF_CONTENDED or
                              width >= HALF_ROW and per_row >= HALF_NARROW_CONTENDED):
            # Inductor's partitions add in the values' dtype: at full speed in pairs only;
            # they take an index_put from INDUCTOR_CONTENDED a row, else the own adds do
            partitions = small and index_put and half_pairs(width)
            if wide_own_adds(rows, width, n, dtype) and \
                    not (partitions and per_row >= INDUCTOR_CONTENDED):
                return COMMRT, (f"{dtype} rows of {width}, {per_row:.0f} a row: added in "
                                f"{dtype} where the GPU finds few adds an address, else "
                                "summed in fp32")
            if partitions:
                return INDUCTOR_PARTITIONED, (f"{dtype} rows of {width}, {per_row:.0f} a "
                                              f"row, {n * width} values: Inductor's partitions")
            return COMMRT, f"{dtype} rows of {width} summed in fp32, {per_row:.0f} a row"
        if dtype not in HALF and width >= WIDE_ROW and per_row >= FP32_CONTENDED and \
                not (small and index_put):
            if hot := wide_hot(rows, width, n, dtype):
                return COMMRT, (f"rows of {width} with {per_row:.0f} values a row: up to "
                                f"{hot} hot rows as products where the GPU finds no more")
            return COMMRT, f"rows of {width} with {per_row:.0f} values a row"
        # tens of values a row: up to INDUCTOR_CONTENDED, or FP32_MID_VALUES value elements
        # a row on rows under WIDE_ROW (over INDUCTOR_CONTENDED values there)
        mid = n >= FP32_SPREAD_INDICES and \
            FP32_SPREAD_PER_ROW <= per_row <= max(INDUCTOR_CONTENDED, FP32_MID_VALUES / width)
        if dtype not in HALF and width >= FP32_SPREAD_ROW and mid:
            return COMMRT, (f"rows of {width} with {per_row:.0f} values a row, {n} indices: "
                            "contention found on the GPU")
        if dtype in HALF and HALF_MID_ROW <= width < WIDE_ROW and (
                width >= HALF_SPREAD_ROW and mid or
                not index_put and per_row >= HALF_INDEX_ADD_PER_ROW):
            return COMMRT, (f"{dtype} rows of {width} with {per_row:.0f} values a row, "
                            f"{n} indices: summed in fp32, contention found on the GPU")
    if index_put and n >= INDUCTOR_MIN_INDICES and per_row >= INDUCTOR_CONTENDED:
        return INDUCTOR_PARTITIONED, f"rows of {width} with {per_row:.0f} values a row"
    return INDUCTOR, f"rows of {width} with {per_row:.0f} values a row"


def half_pairs(width: int) -> bool:
    """Whether fp16/bf16 rows of ``width`` elements keep paired atomics (``HALF_PAIR``)."""
    return width % HALF_PAIR == 0


def few_rows(rows: int, width: int) -> bool:
    """Rows of ``width`` elements into so few output rows that each is summed a program."""
    return 0 < rows <= FEW_ROWS and width <= FEW_WIDTH and \
        (width <= FEW_NARROW or rows <= FEW_WIDE_ROWS)


def few_ints(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """int32 or int64 values into so few output rows that each is summed a program, in the
    values' dtype."""
    return dtype in INT_DTYPES and few_rows(rows, width) and n >= MIN_INDICES


def int_adds(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """int64 values that ``few_ints`` and ``int_flat`` do not take: added with native 64-bit
    atomics."""
    return dtype == torch.int64 and rows > 0 and n >= MIN_INDICES and \
        not few_ints(rows, width, n, dtype) and not int_flat(rows, width, n, dtype)


def int_flat(rows: int, width: int, n: int, dtype: torch.dtype) -> int:
    """The copies (0: not these values) of integer rows of ``INT_FLAT_ROW`` elements or more
    that ``few_ints`` does not take, added one element a thread with no plan: a power of
    two up to ``n / INT_FLAT_INDICES`` whose copies take at most ``INT_FLAT_ELEMENTS``,
    where each then takes at most ``INT_FLAT_MAX`` indices; int32 on one copy only on
    outputs of up to ``INT_FLAT_ELEMENTS``, int64 on up to ``INT64_FLAT_COPIES``."""
    if dtype not in INT_DTYPES or width < INT_FLAT_ROW or not 0 < rows < 1 << 31 or \
            n < 1 or few_ints(rows, width, n, dtype):
        return 0
    p = 1
    while p * INT_FLAT_INDICES < n and 2 * p * rows * width <= INT_FLAT_ELEMENTS:
        p *= 2
    if n > p * INT_FLAT_MAX or dtype == torch.int64 and p > INT64_FLAT_COPIES or \
            dtype == torch.int32 and p == 1 and rows * width > INT_FLAT_ELEMENTS:
        return 0
    return p


def int_narrow(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """int32 rows of up to ``INT_ROW`` elements that ``few_ints`` and ``int_flat`` do not
    take, with fewer than ``NARROW_PARTITIONED`` values a row (rows over ``NARROW_ROW``:
    ``INT_COPIES_PER_ROW``; more stay with Inductor): the narrow kernels, which find hot
    rows and choose copies on the GPU, summed in int32."""
    per_row = INT_COPIES_PER_ROW if width > NARROW_ROW else NARROW_PARTITIONED
    return dtype == torch.int32 and width <= INT_ROW and 0 < rows < 1 << 31 and \
        MIN_INDICES <= n < per_row * rows and not few_ints(rows, width, n, dtype) and \
        not int_flat(rows, width, n, dtype)


def few_products(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """fp32 or bf16 rows too wide for ``few_rows``' selects into so few output rows that
    each program sums its values into every one of them as one-hot products."""
    return (dtype in FEW_PRODUCTS_DTYPES and 0 < rows <= FEW_ROWS and
            FEW_PRODUCTS_ROW <= width <= FEW_PRODUCTS_MAX_ROW and MIN_INDICES <= n and
            n * width < WIDE_MIN_VALUES)


def few_half_products(width: int, dtype: torch.dtype) -> bool:
    """fp16/bf16 rows into a few rows summed as one-hot products in their dtype (on a GPU)
    rather than by selects (narrower rows) or tf32 products."""
    return dtype in (torch.float16, torch.bfloat16) and width >= FEW_HALF_PRODUCTS_ROW


def spread(rows: int, width: int, n: int, dtype: torch.dtype, half: bool = False) -> bool:
    """fp32 narrow rows with so many values a row that copies always pay: commrt's copy of
    Inductor's partitions (``scatter_spread``); ``half``: ``SPREAD_HALF`` rows of
    ``SPREAD_BUSY_ROW`` too (where no compiled column partitions the scatter)."""
    takes = dtype == torch.float32 or half and dtype in SPREAD_HALF and \
        width == SPREAD_BUSY_ROW
    return (takes and width <= NARROW_ROW and n >= MIN_INDICES and
            not few_rows(rows, width) and not shared_sums(rows, width, n, dtype) and
            n >= NARROW_PARTITIONED * rows and (width >= NARROW_PARTITIONED_ROW or rows > HOT))


def spread_busy(width: int) -> int:
    """``spread``'s ``busy`` for rows of ``width`` elements: blocks where a few rows take
    most go through the warp sums (rows of ``SPREAD_BUSY_ROW``; 0: never)."""
    return SPREAD_BUSY if width == SPREAD_BUSY_ROW else 0


def spread_copies(plane: int, n: int, memory: int, fraction: float = MEMORY_FRACTION) -> int:
    """``spread``'s fp32 copies of a ``plane``-element output: Inductor's partition count,
    within ``fraction`` of ``memory`` (1: too large for two)."""
    return _within(max(1, inductor_partitions(plane, n, 4, memory)), plane * 4, memory,
                   fraction)


def shared_sums(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """Single values (1-D, or rows of 1) into so few rows that each program sums them all
    in shared memory (fp32: in windows of ``SHARED_PLANE`` rows)."""
    most = SHARED_WINDOWS * SHARED_PLANE if dtype == torch.float32 else SHARED_PLANE
    return dtype in NARROW_DTYPES and width == 1 and FEW_ROWS < rows <= most and \
        n >= MIN_INDICES


def half_adds(rows: int, width: int, n: int, partitions: int, dtype: torch.dtype) -> bool:
    """fp16/bf16 rows that the narrow kernels add in their own dtype (one copy)."""
    return dtype in HALF and partitions == 1 and half_pairs(width) and (
        (HALF_ADDS_ROW <= width and n <= HALF_ADDS_PER_ROW * rows and
         (width <= NARROW_ROW or half_copy(rows, width, n, dtype))) or
        local_sums(rows, width, n, dtype) > 0)


def own_adds(rows: int, width: int, n: int, partitions: int, dtype: torch.dtype) -> int:
    """The adds an address may expect for narrow fp16/bf16 rows on one copy to be added in
    their dtype where the plan finds no hot row (0: always through the fp32 copy)."""
    if (dtype in HALF and partitions == 1 and HALF_ADDS_ROW <= width <= NARROW_ROW and
            half_pairs(width) and rows * width < OWN_ADDS_PLANE and
            not half_adds(rows, width, n, partitions, dtype)):
        return OWN_ADDS
    return 0


def half_copy(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """fp16/bf16 rows of ``HALF_ADDS_ROW`` to ``ONE_COPY_ROW`` elements, a few values a
    row, on a large output (``copy_plane``): the narrow kernels take them with one copy, in
    their dtype."""
    return (dtype in HALF and HALF_ADDS_ROW <= width <= ONE_COPY_ROW and
            MIN_INDICES <= n <= HALF_ADDS_PER_ROW * rows and rows * width >= copy_plane(width))


def wide_own_adds(rows: int, width: int, n: int, dtype: torch.dtype) -> int:
    """The adds an address may expect for fp16/bf16 rows on commrt's wide kernels to be
    added in their dtype (0: always through the fp32 copies)."""
    if dtype in HALF and width >= WIDE_ROW and half_pairs(width) and \
            MIN_INDICES <= n <= WIDE_OWN_PER_ROW * rows:
        return WIDE_OWN_ADDS
    return 0


def wide_hot(rows: int, width: int, n: int, dtype: torch.dtype) -> int:
    """The most distinct rows for which commrt's wide kernels sum hot rows as products
    (``partitioned_index_add(hot=...)``; 0: they never look for them)."""
    if dtype == torch.float32 and width >= WIDE_ROW and n >= WIDE_HOT_PER_ROW * rows and \
            n * width >= WIDE_HOT_VALUES:
        return WIDE_HOT
    return 0


def wide_on_one_copy(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """Rows wider than ``NARROW_ROW`` that the narrow kernels take with one copy (fp32:
    ``one_copy``; fp16/bf16, added in their dtype: ``half_copy``)."""
    return one_copy(rows, width, n, dtype) or half_copy(rows, width, n, dtype)


def local_sums(rows: int, width: int, n: int, dtype: torch.dtype) -> int:
    """fp32 rows (bf16 rows of over ``LOCAL_WIDE``, an even width, added in bf16) that the
    narrow kernels take with one copy and no plan, each block summing its rows that share
    an index: how many rows must share it (0: not these rows)."""
    few = LOCAL_WIDE < width and rows <= LOCAL_FEW_ROWS
    if dtype == torch.float32:
        fits = LOCAL_ROW <= width and (n <= LOCAL_PER_ROW * rows or few)
    else:
        fits = dtype == torch.bfloat16 and LOCAL_WIDE < width and half_pairs(width) and \
            n <= LOCAL_PER_ROW * rows
    if fits and width <= LOCAL_MAX_ROW and MIN_INDICES <= n and rows * width < ONE_COPY_PLANE:
        return LOCAL_MIN
    return 0


def local_blocks(rows: int, width: int, half_adds: bool = False) -> tuple[int, int]:
    """(columns, warps) of the narrow ``_scatter``'s blocks for ``local_sums`` rows (0, 0:
    whole rows, its usual warps); ``half_adds``: added in the output's fp16/bf16 dtype."""
    if width <= LOCAL_WIDE:
        return 0, 0
    if half_adds:
        return LOCAL_COLUMNS, LOCAL_HALF_WARPS
    return LOCAL_COLUMNS, LOCAL_FEW_WARPS if rows <= LOCAL_FEW_ROWS else LOCAL_WARPS


def one_copy(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """fp32 rows wider than ``NARROW_ROW`` that the narrow kernels take with one copy (a
    few values a row on a large output: ``copy_plane``)."""
    return (dtype == torch.float32 and NARROW_ROW < width <= ONE_COPY_ROW and
            MIN_INDICES <= n < FP32_SPREAD_PER_ROW * rows and rows * width >= copy_plane(width))


def copy_plane(width: int) -> int:
    """The fewest output elements on which ``one_copy`` and ``half_copy`` take rows of
    ``width`` elements: ``MID_COPY_PLANE`` for rows wider than ``NARROW_ROW`` and under
    ``WIDE_ROW``, else ``ONE_COPY_PLANE``."""
    return MID_COPY_PLANE if NARROW_ROW < width < WIDE_ROW else ONE_COPY_PLANE


def pair_sample(rows: int) -> int:
    """The narrow plan's second sample for an output of ``rows`` rows (0: none)."""
    return NARROW_PAIR_SAMPLE if rows > NARROW_PAIR_ROWS else 0


def inductor_partitions(numel: int, n: int, itemsize: int, memory: int) -> int:
    """The partition count Inductor's pass picks (0: it would not partition)."""
    if numel == 0 or n == 0:
        return 0
    cap = 4 if numel >= 100_000_000 else 8 if numel >= 10_000_000 else \
        16 if numel >= 1_000_000 else MAX_PARTITIONS
    base = max(2, int(math.sqrt(n / numel) * 16))
    p = min(2 ** math.ceil(math.log2(base)), cap, MAX_PARTITIONS)
    while p >= 2 and numel * itemsize * (p - 1) > INDUCTOR_MEMORY * memory:
        p //= 2
    return p if p >= 2 else 0


def partitions_for(rows: int, n: int, row_bytes: int, memory: int,
                   fraction: float = MEMORY_FRACTION, narrow: bool = False,
                   copies_from: int = NARROW_COPIES_PER_ROW) -> int:
    """commrt's copies: a power of two, <= MAX_PARTITIONS and <= values per row (``narrow``
    rows: twice that, and 1 under ``copies_from`` a row), within ``fraction`` of
    ``memory``."""
    per_row = n // max(1, rows)
    if narrow and per_row < copies_from:
        return 1
    p = 1 << max(0, int(math.log2(max(1, per_row))) + narrow)
    return _within(min(p, MAX_PARTITIONS), rows * row_bytes, memory, fraction)


def narrow_copies(p: int, rows: int, width: int) -> int:
    """``p`` copies of narrow rows of ``width`` elements, halved (not under ``MIN_COPIES``)
    until their fp32 copies take at most ``NARROW_COPY_BYTES``, for rows of
    ``NARROW_PARTITIONED_ROW`` to ``NARROW_ROW`` elements."""
    if not NARROW_PARTITIONED_ROW <= width <= NARROW_ROW:
        return p
    return max(min(p, MIN_COPIES), _within(p, rows * width * 4, NARROW_COPY_BYTES, 1.0))


def _within(p: int, copy_bytes: int, memory: int, fraction: float) -> int:
    """``p`` copies of ``copy_bytes`` each, halved until they take at most ``fraction`` of
    ``memory`` (at least 1)."""
    while p > 1 and p * copy_bytes > fraction * memory:
        p //= 2
    return p
