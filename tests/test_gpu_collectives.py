"""Multi-GPU checks (device machine): every all-gather and reduce-scatter algorithm through
the Communicator against float64, eager and in CUDA graphs; the ops under torch.compile."""

import os

import pytest
import ranks_gpu_collectives
import spawn
from conftest import cuda_count

pytestmark = pytest.mark.multigpu

WORLD = int(os.environ.get("GPU_TEST_WORLD", 0)) or max(2, min(cuda_count(), 8))


def _run(body):
    return spawn.run(body, WORLD, backend="nccl", timeout=900)


def test_every_collective_algorithm_matches_float64_eager_and_graph():
    res = _run(ranks_gpu_collectives.correctness)
    assert [r["failures"] for r in res] == [[]] * WORLD
    assert {"ag_push", "ag_bw", "rs_pull", "rs_push", "nccl"} <= set(res[0]["algos"])


def test_collective_ops_under_torch_compile():
    res = _run(ranks_gpu_collectives.compiled)
    assert [r["failures"] for r in res] == [[]] * WORLD
