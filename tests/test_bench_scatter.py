"""bench_scatter's command line and grid selection, on the CPU."""

import json
import pathlib
import sys

import pytest
import torch

pytest.importorskip("triton")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scatter as bench  # noqa: E402


def test_the_seed_and_the_grid_share_one_rows_option():
    every = bench.parser().parse_args(["--grid"])
    assert every.rows is None  # the seed's SEED_ROWS, every grid size
    assert bench.selected_groups(every) == bench.grid_groups()
    args = bench.parser().parse_args(["--grid", "--widths", "4", "--rows", "1024,8",
                                      "--ops", "index_put", "--dtypes", "bfloat16"])
    assert bench.selected_groups(args) == [("index_put", "bfloat16", 4, 1024),
                                           ("index_put", "bfloat16", 4, 8)]


def test_scatter_add_runs_the_same_grid_into_a_file_of_its_own():
    args = bench.parser().parse_args(["--grid", "--ops", "scatter_add"])
    groups = bench.selected_groups(args)
    assert groups == [("scatter_add", *g[1:]) for g in bench.grid_groups(("index_put",))]
    assert bench.grid_file(groups) == "scatter_add_grid"
    assert bench.grid_file(bench.grid_groups()) == "scatter_grid"
    assert ("scatter_add", "bfloat16", 0, 8) in bench.UNRUN  # Inductor's bf16 atomics
    out, idx = torch.randn(5, 3), torch.tensor([4, 0, 4, 1])
    vals = torch.randn(4, 3)
    for v, o in ((vals, out), (vals[:, 0], out[:, 0])):  # rows, and 1-D values
        assert torch.allclose(bench.OPS["scatter_add"](o, idx, v), o.index_add(0, idx, v))


def test_integer_values_run_apart_into_a_file_of_their_own():
    args = bench.parser().parse_args(["--grid", "--dtypes", "int32,int64"])
    groups = bench.selected_groups(args)
    assert {g[1] for g in groups} == {"int32", "int64"} and len(groups) == len(
        bench.grid_groups(dtypes=("int32", "int64")))
    assert bench.grid_file(groups) == "scatter_int_grid"
    assert bench.grid_file([("scatter_add", "int32", 4, 8)]) == "scatter_add_int_grid"
    assert bench.TOL["int32"] == bench.TOL["int64"] == 0.0  # summed exactly, or wrong
    for dtypes, says in (("float32,int32", "run them apart"), ("int8", "int8 not one of")):
        with pytest.raises(SystemExit, match=says):
            bench.selected_groups(bench.parser().parse_args(["--grid", "--dtypes", dtypes]))


def test_autotune_log_records_each_autotuned_kernel_and_puts_the_method_back():
    from torch._inductor.runtime import triton_heuristics as th

    class Launcher:
        def __init__(self, config):
            self.config = config

    fast, slow = Launcher("XBLOCK: 1024, num_warps: 4"), Launcher("XBLOCK: 512, num_warps: 8")

    class Tuner:
        inductor_meta = {"kernel_name": "triton_poi_fused_index_put_1"}

    class Lock:  # the grid's GPU lock: held while Inductor benchmarks
        held = 0

        def __enter__(self):
            self.held += 1

        def __exit__(self, *exc):
            self.held -= 1

    lock, seen = Lock(), []

    def benchmark(self):
        seen.append(lock.held)
        return {fast: 0.12, slow: 0.10}

    base = th.CachingAutotuner.benchmark_all_configs
    th.CachingAutotuner.benchmark_all_configs = benchmark
    try:
        with bench.autotune_log() as tuned:
            th.CachingAutotuner.benchmark_all_configs(Tuner())  # no grid: no lock
            bench._GPU_LOCK = lock
            try:
                timings = th.CachingAutotuner.benchmark_all_configs(Tuner())
            finally:
                bench._GPU_LOCK = None
        assert seen == [0, 1] and lock.held == 0
        assert timings == {fast: 0.12, slow: 0.10}  # Inductor still gets its timings
        tuned = tuned[1:]
        assert tuned == [{"kernel": "triton_poi_fused_index_put_1",
                          "chose": "XBLOCK: 512, num_warps: 8",
                          "ms": {"XBLOCK: 1024, num_warps: 4": 0.12,
                                 "XBLOCK: 512, num_warps: 8": 0.10}}]
        stub = th.CachingAutotuner.benchmark_all_configs
        with pytest.raises(RuntimeError), bench.autotune_log():
            raise RuntimeError("a column that fails")
        assert th.CachingAutotuner.benchmark_all_configs is stub
    finally:
        th.CachingAutotuner.benchmark_all_configs = base


def test_update_keeps_the_cells_it_does_not_redo_with_their_commit(tmp_path):
    old_meta = {"columns": ["eager"], "date": "2026-01-01", "command": "python full",
                "torch": "2.11", "triton": "3.6", "commit": "abc1234"}
    cells = [{"op": "index_put", "dtype": "float32", "width": w, "rows": 8} for w in (4, 16)]
    (tmp_path / "grid.json").write_text(json.dumps({"meta": old_meta, "cells": cells}))
    args = bench.parser().parse_args(["--grid", "--update", "--out-dir", str(tmp_path)])
    meta = {"file": "grid", "columns": ["eager"]}
    kept = bench._kept_cells(args, meta, [("index_put", "float32", 4, 8)])
    assert [c["width"] for c in kept] == [16] and kept[0]["run"] == "python full"
    assert meta["merged"] == [{k: old_meta[k] for k in ("date", "command", "torch", "triton",
                                                        "commit")}]


def test_error_above_reads_one_call_and_every_call():
    """commrt's first call over the compiled column's first, and every call of commrt over
    every call of the compiled column: a few percent between single calls of atomics is
    their order."""
    cell = {"err": {"commrt": 1.02, "compiled": 1.0},
            "errs": {"commrt": [1.02, 1.05, 1.04, 1.06, 1.0], "compiled": [1.0, 1.03, 0.98]}}
    assert bench.error_above(cell) == (True, False)  # commrt's 1.0 is under 1.03
    cell["errs"]["commrt"] = [1.04, 1.05, 1.04, 1.06, 1.031]
    assert bench.error_above(cell) == (True, True)
    assert bench.error_above({"err": {"commrt": 0.9, "compiled": 1.0}}) == (False, False)
    assert bench.error_above({"err": {"commrt": 1.1, "compiled": 1.0}}) == (True, True)
    assert bench.error_above({"err": {"commrt": 1.0, "compiled": float("nan")}}) == \
        (False, False)
