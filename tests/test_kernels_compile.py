"""Every Triton kernel commrt launches compiles for sm_90 on a machine without a GPU
(the interpreter tests run the kernels' Python but never lower it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

KERNELS = {"_all_gather_kernel", "_all_gather_push_kernel", "_barrier_kernel", "_hot", "_init",
           "_int_adds", "_int_copy", "_int_flat", "_int_sum", "_one_shot_kernel",
           "_one_shot_rms_kernel", "_partial", "_prepare",
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


PTX = """
import re, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
{setup}
k = triton.compile(ASTSource({kernel}, signature=sig, constexprs=consts, attrs=attrs),
                   target=GPUTarget("cuda", 90, 32), options={{"num_warps": 4}})
print(" ".join(re.findall(r"{pattern}", k.asm["ptx"])))
"""


def _ptx_words(kernel: str, setup: str, pattern: str, tmp_path) -> list[str]:
    """The instructions matching ``pattern`` in the PTX of ``kernel`` compiled for sm_90,
    its ``sig``, ``consts`` and ``attrs`` made by ``setup``."""
    script = PTX.format(kernel=kernel, setup=setup, pattern=pattern)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # really compile, never a cached cubin
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


INT_SUM = """
from commrt.fx.scatter_ints import _int_sum
names = _int_sum.arg_names
sig = {"self_ptr": "*i32", "extra": "*i32", "out": "*i32", "plane": "i64", "stride": "i64",
       "P": "constexpr", "CP": "constexpr", "BLOCK": "constexpr"}
consts = {(names.index("P"),): 128, (names.index("CP"),): 32, (names.index("BLOCK"),): 256}
aligned = ("self_ptr", "extra", "out", "stride")  # plane: 792, not a multiple of 16
attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_int_sum_loads_the_copies_in_vectors_on_any_plane(tmp_path):
    """``_int_sum`` reads the copies up to their 16-aligned stride: on a plane of 792
    elements (int32 rows of 99 into 8 rows) its 128 copies load four elements a load,
    and only ``self`` element by element."""
    loads = _ptx_words("_int_sum", INT_SUM, r"ld\.global[.\w]*", tmp_path)
    # [32 copies, 256 elements] a step on 128 threads: 64 elements a thread a step, in
    # vectors (64 of 4 in all on Triton 3.9); element by element only self's (one or two)
    scalar = loads.count("ld.global.b32")
    assert scalar <= 2 and len(loads) - scalar >= 32, loads


SCATTER = """
from commrt.fx.scatter_kernels import _scatter, copy_stride, scatter_config
names = _scatter.arg_names
ptrs = {"acc": "*fp32", "extra": "*fp32", "idx": "*i64", "vals": "*fp32", "state": "*i32",
        "out": "*fp32"}
sig = {**ptrs, "n": "i32", "rows": "i32"}
sig.update({k: "constexpr" for k in names if k not in sig})
cfg = dict(scatter_config(99, torch.float32), WIDE=False, PDL=True, TRIGGER=True,
           EARLY=True, OWN=False, ALIGN=16, HALF=False, HOT=False, S=copy_stride(99))
consts = {(names.index(k),): v for k, v in cfg.items()}
attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in ptrs}
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_wide_scatter_adds_rows_of_any_width_in_vectors(tmp_path):
    """fp32 rows of 99 go into copies whose rows start on 16 bytes (``copy_stride``): the
    wide ``_scatter`` adds them four elements an instruction (at D's own stride, 48 scalar
    adds a thread), and only an infinity's or NaN's own add element by element."""
    adds = _ptx_words("_scatter", SCATTER, r"(?:red|atom)\.global[.\w]*", tmp_path)
    # [16 rows, 128 columns] on 128 threads: the plain adds and the combined rows' sums
    # in vectors of four (4 a thread each); the infinities' masked adds (16) one by one
    vectors = [a for a in adds if ".v4." in a]
    assert len(vectors) >= 8 and len(adds) - len(vectors) <= 16, adds
