"""``commrt.patch()`` on NCCL ranks (device machine): bf16 tensor-parallel modules give
bitwise their unpatched outputs at world size 2, eager, in CUDA graphs and compiled."""

import pytest
import ranks_gpu_patch
import spawn

pytestmark = pytest.mark.multigpu

NO_CACHE = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def test_patched_tp_modules_bitwise_eager_graph_and_compiled_at_world_size_2():
    res = spawn.run(ranks_gpu_patch.tp_modules_bf16, 2, backend="nccl", env=NO_CACHE,
                    timeout=900)
    assert [r["failures"] for r in res] == [[], []], res
