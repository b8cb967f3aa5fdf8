"""``commrt.timing`` on a GPU (``pytest -m gpu tests/test_gpu_timing.py``)."""

import pytest
import torch

from commrt.timing import time_graph, time_graphs

pytestmark = pytest.mark.gpu


def test_time_graphs_gives_each_graph_its_own_replays():
    """Graph g sleeps g + 1 units (the callable counts its calls: 3 warm-up calls and
    ``ops`` captured calls a graph): each median must be its own graph's, in order, and
    one graph alone must read as ``time_graph`` does."""
    ops, unit, calls = 4, 200_000, [0]

    def fn():
        torch.cuda._sleep(unit * (1 + calls[0] // (3 + ops)))
        calls[0] += 1

    dev = torch.device("cuda")
    each = time_graphs(fn, dev, ops=ops, replays=5, graphs=3)
    assert len(each) == 3 and all(t > 0 for t in each), each
    assert each[0] < each[1] < each[2], each
    assert 2.5 < each[2] / each[0] < 3.5, each  # 3 units against 1
    calls[0] = 0
    one = time_graph(fn, dev, ops=ops, replays=5)
    assert 0.8 < one / each[0] < 1.25, (one, each)
