"""``bench_scatter.round_orders``: how the grid interleaves the columns of a cell."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scatter as bench  # noqa: E402


@pytest.mark.parametrize("count,rounds", [(1, 5), (3, 5), (4, 5), (4, 4), (5, 3)])
def test_every_call_runs_once_a_round_and_no_call_is_always_first(count, rounds):
    orders = bench.round_orders(count, rounds)
    assert len(orders) == rounds
    assert all(sorted(o) == list(range(count)) for o in orders)
    firsts = [o[0] for o in orders]
    assert len(set(firsts)) == min(count, rounds)
    if count > 2 and rounds >= count:  # every call after a different neighbour over rounds
        for k in range(count):
            before = {o[o.index(k) - 1] for o in orders if o.index(k) > 0}
            assert len(before) >= 2


def test_no_calls_no_rounds():
    assert bench.round_orders(0, 5) == []
