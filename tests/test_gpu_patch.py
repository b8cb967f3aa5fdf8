"""``commrt.patch()`` on NCCL ranks (device machine): bf16 tensor-parallel modules give
bitwise their unpatched outputs at world size 2, eager, in CUDA graphs and compiled; calls
commrt leaves to torch run torch's own kernels without waiting on the GIL."""

import pytest
import ranks_gpu_patch
import ranks_patch
import spawn

pytestmark = pytest.mark.multigpu

NO_CACHE = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def test_patched_tp_modules_bitwise_eager_graph_and_compiled_at_world_size_2():
    res = spawn.run(ranks_gpu_patch.tp_modules_bf16, 2, backend="nccl", env=NO_CACHE,
                    timeout=900)
    assert [r["failures"] for r in res] == [[], []], res


def test_calls_left_to_torch_never_deadlock_against_nccl_watchdog():
    assert spawn.run(ranks_patch.untaken_calls, 2, 2000, backend="nccl",
                     timeout=300) == [True, True]
