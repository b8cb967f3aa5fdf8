"""Every Triton kernel commrt launches compiles for sm_90 on a machine without a GPU
(the interpreter tests run the kernels' Python but never lower it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

KERNELS = {"_all_gather_kernel", "_all_gather_push_kernel", "_barrier_kernel", "_hot", "_init",
           "_int_adds", "_int_flat", "_int_sum", "_one_shot_kernel", "_one_shot_rms_kernel",
           "_partial", "_prepare",
           "_push_kernel", "_push_rms_kernel", "_reduce_scatter_kernel",
           "_reduce_scatter_push_kernel", "_scatter", "_shared_partial", "_spread", "_spread_sum",
           "_sum", "_total", "_two_shot_kernel", "_two_shot_push_kernel", "_two_shot_rms_kernel"}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_every_kernel_compiles_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # really compile, never a cached cubin
    script = os.path.join(os.path.dirname(__file__), "compile_sm90.py")
    r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout[-3000:] + r.stderr[-3000:]
    compiled = set(r.stdout.split(": ", 1)[1].strip().split(", "))
    assert compiled == KERNELS, compiled ^ KERNELS
