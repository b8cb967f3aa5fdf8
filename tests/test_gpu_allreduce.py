"""Multi-GPU checks (device machine): every algorithm against a float64 reference."""

import os

import pytest
import ranks_gpu
import spawn
from conftest import cuda_count

pytestmark = pytest.mark.multigpu

# every GPU of the machine, as a tensor-parallel group would use them (GPU_TEST_WORLD
# picks fewer)
WORLD = int(os.environ.get("GPU_TEST_WORLD", 0)) or max(2, min(cuda_count(), 8))


def _run(body, env=None):
    return spawn.run(body, WORLD, backend="nccl", env=env, timeout=900)


def test_every_algorithm_dtype_and_size_matches_float64_and_ranks_agree():
    res = _run(ranks_gpu.correctness)
    assert [r["failures"] for r in res] == [[]] * WORLD
    assert {"one_shot_push", "one_shot", "two_shot", "two_shot_push", "nccl"} \
        <= set(res[0]["algos"])


def test_workspace_tensors_out_noncontiguous_and_async():
    res = _run(ranks_gpu.workspace_and_out)
    assert [r["failures"] for r in res] == [[]] * len(res)


def test_cuda_graph_replays_with_fresh_data():
    res = _run(ranks_gpu.graph_capture)
    assert [r["failures"] for r in res] == [[]] * len(res)


def test_torch_compile_fullgraph():
    res = _run(ranks_gpu.compiled)
    assert [r["failures"] for r in res] == [[]] * len(res)


def test_programmatic_dependent_launch_waits_for_the_producer():
    res = _run(ranks_gpu.pdl_after_producers)
    assert [r["failures"] for r in res] == [[]] * len(res)


def test_ten_thousand_back_to_back_calls_with_nccl_interleaved():
    res = _run(ranks_gpu.soak)
    assert [r["wrong"] for r in res] == [0] * WORLD


def test_spin_timeout_names_the_peer_that_skipped_a_call():
    res = _run(ranks_gpu.timeout, env={"COMMRT_SPIN_TIMEOUT": "1"})
    assert "peer rank 1" in res[0]["message"]


def test_drop_in_semantics_on_nccl_and_the_op_in_a_cuda_graph():
    res = _run(ranks_gpu.process_group_semantics)
    assert [r["failures"] for r in res] == [[]] * len(res)


def test_check_mode_mismatch_raises_on_every_rank():
    res = _run(ranks_gpu.check_mode, env={"COMMRT_CHECK": "1"})
    assert all("rank 1: shape (4, 9)" in r["message"] for r in res)


def test_fused_residual_rmsnorm_matches_float64_on_every_path():
    res = _run(ranks_gpu.fused_rmsnorm)
    assert [r["failures"] for r in res] == [[]] * len(res)
    assert res[0]["ran"] > 100


def test_copy_engine_group_matches_float64_back_to_back_in_graphs_and_compiled():
    res = _run(ranks_gpu.copy_engine_group)
    assert [r["failures"] for r in res] == [[]] * WORLD
    assert res[0]["backend"] == "commrt_ce"
