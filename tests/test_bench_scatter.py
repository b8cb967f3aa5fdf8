"""bench_scatter's command line and grid selection, on the CPU."""

import pathlib
import sys

import pytest

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
