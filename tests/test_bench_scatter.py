"""bench_scatter's command line and grid selection, on the CPU."""

import pathlib
import sys

import pytest

pytest.importorskip("triton")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scatter as bench  # noqa: E402


def test_the_seed_and_the_grid_share_one_rows_option():
    assert bench.parser().parse_args([]).rows is None  # the seed's 501, every grid size
    args = bench.parser().parse_args(["--grid", "--widths", "4", "--rows", "1024",
                                      "--ops", "index_put", "--dtypes", "bfloat16"])
    groups = bench.grid_groups(tuple(args.ops.split(",")), tuple(args.dtypes.split(",")),
                               (4,), (int(args.rows),))
    assert groups and all(g[1] == "bfloat16" and 1024 in g for g in groups), groups
    assert len(bench.grid_groups()) > len(groups)
