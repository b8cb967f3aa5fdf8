"""Compile every Triton kernel commrt launches for sm_90, on a machine without a GPU
(``test_kernels_compile`` starts it; never under ``TRITON_INTERPRET``).

The interpreter runs the kernels' Python on the CPU but never lowers them, so code that
only the GPU compiler refuses (types, layouts, inline PTX) would pass it. Here the
callers run on CPU tensors with ``JITFunction.run`` recording instead of launching; each
distinct specialisation is then compiled (one process a core) to a cubin for
``GPUTarget("cuda", 90, 32)`` in the GPU flavour (``TIMER`` on, and ``PDL``, ``TRIGGER``
and ``EARLY`` where a kernel takes them). Prints ``ok N specialisations of K kernels: NAMES``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction, mangle_type

assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "run without TRITON_INTERPRET"

TARGET = GPUTarget("cuda", 90, 32)
GPU_FLAVOUR = {"TIMER": True, "PDL": True, "TRIGGER": True, "EARLY": True}
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl", "debug",
           "sanitize_overflow")
calls: list = []  # (kernel, args, kwargs) of each recorded launch
specs: list = []  # (kernel, signature, constexprs, options) of each distinct one


def _record(self, *args, grid, warmup, **kwargs):  # noqa: ARG001 (JITFunction.run's)
    calls.append((self, args, kwargs))


def specialisation(fn, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """(signature, constexprs, options) of one recorded launch, in the GPU flavour."""
    options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
    bound = dict(zip(fn.arg_names, args, strict=False))
    bound.update(kwargs)
    signature, consts = {}, {}
    for p in fn.params:
        v = bound[p.name] if p.name in bound else p.default
        if p.is_constexpr or v is None:
            signature[p.name] = "constexpr"
            consts[p.name] = GPU_FLAVOUR.get(p.name, v)
        else:
            signature[p.name] = mangle_type(v)
    return signature, consts, options


def scatter_calls() -> None:
    from commrt.fx.scatter_few import _launches as few_launches
    from commrt.fx.scatter_few import few_rows_index_add
    from commrt.fx.scatter_ints import int_flat_index_add, int_index_add
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_narrow import narrow_index_add
    from commrt.fx.scatter_rule import ONE_COPY_HOT, ONE_COPY_HOT_MIN

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for itype in (torch.int64, torch.int32):
            idx = torch.zeros(1000, dtype=itype)
            for d in (1, 100, 4096):
                self, vals = torch.zeros(64, d, dtype=dtype), torch.zeros(1000, d, dtype=dtype)
                for partitions, leaders in ((1, -1), (8, 16)):
                    partitioned_index_add(self, idx, vals, partitions, leaders=leaders)
                if dtype != torch.float32:  # adds in the output's dtype where uncontended
                    partitioned_index_add(self, idx, vals, 8, own_adds=128)
                    # rows combined as products in their dtype, as on a GPU
                    partitioned_index_add(self, idx, vals, 8, leaders=16, half_products=True)
                # hot rows summed as products (_hot), in the values' dtype as on a GPU
                for hot in (32, 64):
                    partitioned_index_add(self, idx, vals, 8, leaders=16, hot=hot,
                                          half_products=dtype != torch.float32)
            for shape in ((), (3,), (16,)):
                self, vals = torch.zeros(64, *shape, dtype=dtype), torch.zeros(1000, *shape,
                                                                             dtype=dtype)
                for partitions, hot in ((1, 0), (1, 16), (64, 16)):
                    narrow_index_add(self, idx, vals, partitions, hot=hot)
                if dtype != torch.float32 and shape == (16,):  # adds in the output's dtype
                    for hot in (0, 16):
                        narrow_index_add(self, idx, vals, 1, hot=hot, half_adds=True)
            # few output rows: selects, and one-hot products for wider rows
            for rows, shape in ((8, ()), (16, ()), (16, (3,)), (8, (4,)), (8, (16,)),
                                (16, (8,)), (13, (100,)), (2, (128,))):
                few_rows_index_add(torch.zeros(rows, *shape, dtype=dtype), idx,
                                   torch.zeros(1000, *shape, dtype=dtype))
                if dtype != torch.float32 and shape in ((16,), (100,), (128,)):
                    # the products in fp16/bf16, which few_rows_index_add asks for on a GPU
                    # only
                    G, partial, _ = few_launches(rows, 1000, shape[0], dtype, 8, True, True)
                    partial(idx, torch.zeros(1000, *shape, dtype=dtype),
                            torch.zeros(G * rows * shape[0]), 1000, rows, -(-1000 // G))
            for d in (100, 1024):  # wider rows with one copy (one_copy, half_copy)
                self, vals = torch.zeros(64, d, dtype=dtype), torch.zeros(1000, d, dtype=dtype)
                narrow_index_add(self, idx, vals, 1, hot=ONE_COPY_HOT, hot_min=ONE_COPY_HOT_MIN,
                                 half_adds=dtype != torch.float32)
                for own in {False, dtype != torch.float32}:  # block-local sums, no plan
                    for early in (True, False):  # shared rows found before the wait or after
                        narrow_index_add(self, idx, vals, 1, hot=0, local=2, half_adds=own,
                                         local_early=early)
                if d > 128:  # ... in blocks of part of a row (local_blocks)
                    for warps in (1, 2):
                        narrow_index_add(self, idx, vals, 1, hot=0, local=4, columns=128,
                                         warps=warps)
                    if dtype != torch.float32:  # ... added in their dtype
                        narrow_index_add(self, idx, vals, 1, hot=0, local=4, columns=128,
                                         warps=1, half_adds=True)
    # rows whose fp32 copies are padded to 16 bytes (copy_stride), with the own adds into
    # the output's unpadded rows and the hot rows
    idx = torch.zeros(1000, dtype=torch.int64)
    for dtype, d in ((torch.float32, 99), (torch.bfloat16, 99), (torch.bfloat16, 98)):
        self, vals = torch.zeros(64, d, dtype=dtype), torch.zeros(1000, d, dtype=dtype)
        partitioned_index_add(self, idx, vals, 8, leaders=16,
                              half_products=dtype != torch.float32)
        if d == 98:
            partitioned_index_add(self, idx, vals, 8, own_adds=128)
        if dtype == torch.float32:
            partitioned_index_add(self, idx, vals, 8, leaders=16, hot=32)
    # integers into few rows: the selects in their dtype, Triton's debug on (the assert)
    for dtype in (torch.int32, torch.int64):
        for itype in (torch.int64, torch.int32):
            idx = torch.zeros(1000, dtype=itype)
            for rows, shape in ((8, ()), (16, ()), (16, (3,)), (8, (4,)), (8, (16,))):
                few_rows_index_add(torch.zeros(rows, *shape, dtype=dtype), idx,
                                   torch.zeros(1000, *shape, dtype=dtype))
            # ... and other int64 values with native atomics (int32 too, as tests call it)
            for shape, partitions in (((), 1), ((), 8), ((4,), 1), ((100,), 4), ((1300,), 1)):
                int_index_add(torch.zeros(1024, *shape, dtype=dtype), idx,
                              torch.zeros(1000, *shape, dtype=dtype), partitions)
            # ... or one element a thread, into one copy or into copies summed after
            for shape, partitions in (((1024,), 1), ((100,), 8)):
                int_flat_index_add(torch.zeros(1024, *shape, dtype=dtype), idx,
                                   torch.zeros(1000, *shape, dtype=dtype), partitions)
            if dtype == torch.int32:  # ... and int32 narrow rows on the narrow kernels
                for shape in ((), (3,), (16,)):
                    self, vals = (torch.zeros(64, *shape, dtype=dtype),
                                  torch.zeros(1000, *shape, dtype=dtype))
                    for partitions, hot in ((1, 0), (1, 16), (64, 16)):
                        narrow_index_add(self, idx, vals, partitions, hot=hot)
                for d in (100, 1024):  # ... and wider rows (int_narrow, few values a row)
                    narrow_index_add(torch.zeros(64, d, dtype=dtype), idx,
                                     torch.zeros(1000, d, dtype=dtype), 1, pair_sample=0)
    # the narrow kernels' _init with 64-bit offsets (copies of 2**31 elements or more)
    from commrt.fx.scatter_narrow import BLOCK, NARROW_SAMPLE, _init, state_numel

    x = torch.zeros(64 * 4)
    meta = dict(P=8, S=NARROW_SAMPLE, W=NARROW_SAMPLE, H=16, HOT_MIN=4, HOT_ADDS=1024,
                HOT_SHARE=5, PER_ADDRESS=128, MIN_COPIES=2, SPREAD=64, BLOCK=BLOCK, WIDE=True,
                PDL=True, WAIT=True, num_warps=4)
    idx = torch.zeros(1000, dtype=torch.long)
    state = torch.zeros(state_numel(16), dtype=torch.int32)
    calls.append((_init, (x, x.clone(), torch.zeros(7 * x.numel()), idx, state, 1000, 64,
                          x.numel()), meta))


def shared_calls() -> None:
    """The shared-sums kernel in every shape the rule gives it (``usable`` is checked on
    each compiled variant in ``main``: it runs only on the GPU)."""
    from commrt.fx.scatter_rule import FEW_ROWS, SHARED_PLANE, SHARED_WINDOWS
    from commrt.fx.scatter_shared import WIDE_PLANE, _shared_partial, partial_launch

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for itype in (torch.int64, torch.int32):
            for rows, n in ((FEW_ROWS + 1, 5000), (1000, 1 << 22), (WIDE_PLANE, 1 << 20),
                            (WIDE_PLANE + 1, 1 << 22), (SHARED_PLANE, 1 << 22)):
                idx, vals = torch.zeros(n, dtype=itype), torch.zeros(n, dtype=dtype)
                _, args, meta = partial_launch(idx, rows, 1)
                part = torch.zeros(1, dtype=torch.float32)
                calls.append((_shared_partial, (idx, vals, part, *args), dict(meta)))
            if dtype == torch.float32:  # added to the output, past WIDE_PLANE rows
                for rows in (WIDE_PLANE + 1, SHARED_PLANE, SHARED_PLANE + 1,
                             SHARED_WINDOWS * SHARED_PLANE):
                    idx, vals = torch.zeros(1 << 22, dtype=itype), torch.zeros(1 << 22)
                    _, args, meta = partial_launch(idx, rows, 1, flush=True)
                    part = torch.zeros(1, dtype=torch.float32)
                    calls.append((_shared_partial, (idx, vals, part, *args), dict(meta)))


def spread_calls() -> None:
    """The spread kernel as the pass calls it, and with the warp sums it takes only on a
    GPU (``has_warp_sums``)."""
    from commrt.fx.scatter_rule import (
        SPREAD_BUSY,
        SPREAD_BUSY_HOT_MIN,
        SPREAD_HOT,
        SPREAD_HOT_MIN,
    )
    from commrt.fx.scatter_spread import _spread, spread_index_add

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for itype in (torch.int64, torch.int32):
            idx = torch.zeros(1000, dtype=itype)
            for d in (1, 4, 16):
                shape = (d,) if d > 1 else ()
                vals = torch.zeros(1000, *shape, dtype=dtype)
                spread_index_add(torch.zeros(64, *shape, dtype=dtype), idx, vals, 8,
                                 hot=SPREAD_HOT, hot_min=SPREAD_HOT_MIN)
                if d > 1:  # with the warp sums (int64 offsets once)
                    wide = dtype == torch.float32 and itype == torch.int64 and d == 4
                    for w in {False, wide}:
                        meta = dict(D=d, DP=d, R=max(128, 1024 // d), P=8, HOT=SPREAD_HOT,
                                    HOT_MIN=SPREAD_BUSY_HOT_MIN, WIDE=w, PDL=True,
                                    BUSY=SPREAD_BUSY, num_warps=4)
                        calls.append((_spread, (torch.zeros(8 * 64 * d + 2), idx, vals, 1000,
                                                64, 64 * d), meta))


def collective_calls() -> None:
    from commrt import collective_kernels, custom
    from commrt.symm_mem import copy_engine
    from commrt.symm_mem.workspace import Workspace

    world, data, slot = 2, 64 * 1024, 16 * 1024
    total = Workspace.total_bytes(world, data, slot)
    ws = Workspace([torch.zeros(total, dtype=torch.uint8) for _ in range(world)], 0, data,
                   slot, "compile")
    copy_engine.barrier(ws, 1000, True)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.zeros(1000, dtype=dtype)
        for algorithm in ("one_shot", "two_shot", "two_shot_push", "one_shot_push"):
            custom.run(algorithm, ws, x, torch.empty_like(x), {}, timeout=1.0)
        rows = torch.zeros(4, 256, dtype=dtype)
        for algorithm in ("one_shot", "two_shot_push", "one_shot_push"):
            custom.run_fused(algorithm, ws, rows, rows.clone(), rows[0].clone(),
                             torch.empty_like(rows), torch.empty_like(rows), 1e-5, {}, 1.0)
        big = torch.zeros(world * 1000, dtype=dtype)
        for algorithm in collective_kernels.ALL_GATHER_ALGORITHMS:
            collective_kernels.run_all_gather(algorithm, ws, x, big, {}, 1.0)
        for algorithm in collective_kernels.REDUCE_SCATTER_ALGORITHMS:
            collective_kernels.run_reduce_scatter(algorithm, ws, big, x.clone(), {}, 1.0)


def compile_one(i: int) -> str | None:
    """Compile ``specs[i]``; None, or why it failed (in a worker process)."""
    fn, signature, consts, options = specs[i]
    try:
        kernel = triton.compile(ASTSource(fn, signature, consts), target=TARGET,
                                options=options)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return (f"{fn.fn.__module__}.{fn.__name__} {consts} {options}: does not compile "
                f"for sm_90: {type(exc).__name__}: {first}")
    if not kernel.asm.get("cubin"):
        return f"{fn.__name__} {consts}: no cubin"
    if fn.__name__ == "_shared_partial":
        from commrt.fx.scatter_shared import usable

        if not usable(kernel, consts):
            return f"_shared_partial {consts}: not fenced"
    return None


def main() -> None:
    JITFunction.run = _record
    scatter_calls()
    shared_calls()
    spread_calls()
    collective_calls()
    seen = set()
    for fn, args, kwargs in calls:
        signature, consts, options = specialisation(fn, args, dict(kwargs))
        key = (fn.__name__, fn.fn.__module__, tuple(signature.items()),
               tuple(sorted((k, repr(v)) for k, v in consts.items())),
               tuple(sorted(options.items())))
        if key not in seen:
            seen.add(key)
            specs.append((fn, signature, consts, options))
    # one compile per core: each is one Python thread (forked, so the workers share specs)
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        for failure in pool.imap_unordered(compile_one, range(len(specs))):
            if failure:
                pool.terminate()
                sys.exit(failure)
    names = sorted({k[0] for k in seen})
    print(f"ok {len(specs)} specialisations of {len(names)} kernels: {', '.join(names)}")


if __name__ == "__main__":
    main()
