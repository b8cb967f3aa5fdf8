"""Forms of the wide ``_scatter`` (values loaded before the wait, the combined rows' adds of
infinities, the own adds' loop) on the seed benchmark's shape and the grid's.

One GPU. Each form is the shipped ``scatter_kernels._scatter`` with its source edited
(``FORMS``: text replaced, each edit asserted to match once), compiled from a file of its
own and launched by the op in place of the shipped kernel:

- ``preload``: the first block of values (a whole row of up to ``BD`` elements) loads
  before the programmatic wait for ``_prepare``, as the narrow ``_scatter`` does;
- ``one atomic``: where rows combine, a row holding an infinity or NaN adds it in the same
  atomic as the combined sums (its mask a row's: the vector atomics stay), not in a
  masked atomic of its own;
- ``no poison check``: without the block's check for an index out of range (data in range);
- ``no PDL``: every launch a plain one (no programmatic dependent launch);
- with ``--forms hints`` (``HINTS``, the seed's cells only): without the alignment hint
  on the copies' rows (scalar atomics), and without the combined rows' adds of infinities
  (wrong where a value is one: timed, not checked with them);
- with ``--forms codes`` (``CODES``): the combined rows' infinities and NaNs carried in
  the product as codes (``_CODED``), with no atomic of their own;
- with ``--forms flags`` (``FLAGS``): the infinities' atomic behind a branch the whole
  block takes where one of its values is not finite (``block branch``), and also the
  product on the values as loaded where none is (``block paths``); or the product on the
  values as loaded, and the shipped sums from values loaded again only where one of its
  sums is not finite (``checked product``);
- with ``--forms own``: where the plan adds in the output's dtype, a loop of its own,
  before the rows' compare matrix and reductions that only the other paths need (or with
  the compare matrix before the wait, as shipped, and only the reductions after);
- with ``--forms order`` (``ORDER``): the combined rows' atomic of infinities and NaNs
  issued before their product (``infinities first``: the values' registers free before
  the product's), also compiled with at most 48 registers a thread (``maxnreg``), and the
  shipped kernel so capped; and, timed only, without the infinities' adds (the floor);
- with ``--forms rows`` (``ROW_FORMS``): the infinities' atomic masked by rows, not elements
  (a row that holds one adds its non-finite values, zeros elsewhere: four-element vector
  atomics, a quarter of the predicated ones), after the product or before it; or such a
  row left out of the product whole and added whole before it; and the floor again;
- with ``--forms prologue`` (``PROLOGUE``): the indices' row and range from their low 32
  bits (only the poison's check from all 64), the indices loaded once and converted to
  each layout, both, and both with the compare matrix on one key a row (that also with
  the infinities' atomic first, and so at 48 registers); the keys from the indices loaded
  once, the copies' addresses from a load of their own in the values' layout (also with
  the infinities' atomic first);
- with ``--forms vectors`` (``VECTORS``): the infinities' atomic masked by aligned groups
  of four columns (four-element vector atomics), after the product or before it (that
  also with ``PROLOGUE``'s keys once and addresses apart);
- with ``--forms ncu``: no timing; the shipped kernel and ``NCU_FORMS`` (the floor, no
  adds of infinities, last) called twice each, in turn, on the seed's shape at k = 0, for
  Nsight Compute to profile the second ``_scatter`` of each (``--launch-skip 5
  --launch-count 5``); ``--profiled`` does the same with the forms of ``--forms``;
- with ``--forms registers``: the shipped kernel alone, on the grid's cells only. Each
  grid row lists the registers and spills of every ``_scatter`` compiled. At 97d441b,
  ``--forms products`` timed fp16/bf16 row sums as products in their own dtype, where
  before they were tf32 products of the values in fp32; that form is now shipped.

Cells: one of the seed's three scatters (fp32 rows of 100 into 501 rows, indices from
0..k, ``--seed-n`` indices; also a quarter of them) and the grid's cells of the wide
kernels (``probe_wide_preload``'s). Every form is checked against float64 (and a value
row of +inf, one of -inf and one of NaN in the seed cells' check), then µs
a call in a CUDA graph of 20 calls (median of ``ROUNDS`` rounds taken in turn), and each
kernel's µs (profiler, median of 20 eager calls). ``--old DIR``: also an earlier commit's
kernels, as ``probe_seed_ab`` takes them::

    python benchmarks/probes/probe_scatter_forms.py \\
        [--forms hints|codes|flags|own|order|rows|prologue|vectors|ncu|registers] [--profiled] \\
        [--old old --old-commit C] [--out r.json]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import inspect
import json
import os
import tempfile
import textwrap

import torch
from probe_narrow_costs import (
    checked_errors,
    inductor,
    inductor_columns,
    kernel_us,
    meta,
    old_kernels,
    old_option,
    rounds,
    variant_rounds,
    with_constants,
)

import commrt.fx.scatter_kernels as wide
from commrt.fx import scatter as pass_scatter
from commrt.symm_mem.launch import Launcher

DEV = torch.device("cuda")
ROUNDS = 5
D, ROWS = 100, 501
KS = (0, 15, 500)
F32, B16 = torch.float32, torch.bfloat16
GRID = [(F32, 100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(B16, 100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(B16, 1024, 8, d) for d in ("uniform", "hot")]

_WAIT = "    if PDL:\n        tl.extra.cuda.gdc_wait()\n"
_LOAD = ("        vn = tl.load(vals + r[:, None] * D + c[None, :], mask=(r < n)[:, None] & "
         "cm[None, :],\n                     other=0)  # not waiting for the indices\n")
# the combined rows: their sums (finite values only), the sums' atomic, the infinities'
_FIN = "                fin = tl.abs(v) < float(\"inf\")\n"
_PRODUCT = ("                onehot = tl.where(same, 1.0, 0.0)\n"
            "                if HALF:  # fp16/bf16: products in their own dtype (exact), "
            "fp32 sums\n"
            "                    s = tl.dot(onehot.to(vn.dtype), tl.where(fin, vn, 0.0)"
            ".to(vn.dtype))\n"
            "                else:\n"
            "                    s = _add_in_parts(tl.zeros([R, BD], tl.float32), onehot,\n"
            "                                      tl.where(fin, v, 0.0), PARTS)\n")
_SUMS = _FIN + _PRODUCT
_SUM_ATOMIC = ("                tl.atomic_add(dst[:, None] + c[None, :], s,\n"
               "                              mask=first[:, None] & cm[None, :], "
               "sem=\"relaxed\")\n")
_INF_ATOMIC = ("                tl.atomic_add(dst[:, None] + c[None, :], v,\n"
               "                              mask=ok[:, None] & cm[None, :] & (fin == 0), "
               "sem=\"relaxed\")\n")
_ATOMICS = _SUM_ATOMIC + _INF_ATOMIC
PRELOAD = [
    (_WAIT, "    c_first = tl.arange(0, BD)\n"
            "    v_first = tl.load(vals + r[:, None] * D + c_first[None, :],\n"
            "                      mask=(r < n)[:, None] & (c_first < D)[None, :], other=0)\n"
            + _WAIT),
    ("    for c0 in range(0, D, BD):\n", "    for c0 in tl.static_range(0, D, BD):\n"),
    (_LOAD, "        if c0 == 0:\n            vn = v_first\n        else:\n"
            + textwrap.indent(_LOAD, "    ")),
]
ONE_ATOMIC = [(_ATOMICS,
               "                odd = tl.max((fin == 0).to(tl.int32), axis=1) > 0\n"
               "                tl.atomic_add(dst[:, None] + c[None, :],\n"
               "                              tl.where(first[:, None], s, 0.0) +\n"
               "                              tl.where(fin, 0.0, v),\n"
               "                              mask=(first | (odd & ok))[:, None] & "
               "cm[None, :],\n                              sem=\"relaxed\")\n")]
NO_POISON = [("    if EARLY or OWN:  # else _sum poisons", "    if False:  # else _sum poisons")]
_DST = "tl.where(part == 0, acc + i * D, extra + ((part - 1) * rows + i) * D)"
NO_HINT = [(f"    dst = tl.multiple_of({_DST},\n                         ALIGN)\n",
            f"    dst = {_DST}\n")]
NO_NONFINITE = [(_INF_ATOMIC, ""), ("tl.where(fin, v, 0.0), PARTS)", "v, PARTS)")]
FORMS = {"preload": PRELOAD, "one atomic": ONE_ATOMIC, "preload, one atomic":
         PRELOAD + ONE_ATOMIC, "preload, no poison check": PRELOAD + NO_POISON}
# the second run's forms (--forms hints): without the alignment hint (scalar atomics), and
# without the combined rows' adds of infinities (wrong where a value is one: timed only)
HINTS = {"no hint": NO_HINT, "no non-finite adds": NO_NONFINITE,
         "no hint, no non-finite adds": NO_HINT + NO_NONFINITE}
_HEADER = ("import triton\nimport triton.language as tl\n\n"
           "from commrt.fx.scatter_kernels import _add_in_parts, _rows_of, _tf32, _tf32_near, "
           "_wrapped, poison\n\n\n")
# coded sums: a combined row's infinities and NaNs ride in the product as codes far above
# any finite sum, which is scaled down by 2^-25 (16 values of up to 2^128 sum under 2^107):
# NaN 2^112, -inf 2^117, +inf 2^122 (up to 31 of each counted exactly in fp32); a sum of
# 2^110 or more decodes as NaN, +inf or -inf, any other is scaled back. No per-element
# atomic and no reduction; values under about 2^-90 lose their low part (subnormal).
_CODED = '''
@triton.jit
def _coded_sums(onehot, v, R: tl.constexpr, BD: tl.constexpr, PARTS: tl.constexpr):
    tl.static_assert(R < 32, "the codes count at most 31 rows")
    fin = tl.abs(v) < float("inf")
    x = tl.where(fin, v, 0.0) * 2.9802322387695312e-08
    code = tl.where(v != v, 5.192296858534828e33,
                    tl.where(v > 0, 5.316911983139664e36, 1.661534994731145e35))
    x1 = _tf32(x)
    acc = tl.zeros([R, BD], tl.float32)
    if PARTS > 1:
        acc = tl.dot(onehot, x1, acc, input_precision="tf32")
        last = tl.where(fin, _tf32_near(x - x1), code)
    else:
        last = tl.where(fin, x1, code)
    acc = tl.dot(onehot, last, acc, input_precision="tf32")
    k = (acc * 1.925929944387236e-34 + 0.5).to(tl.int32)
    pos, neg, nan = k >= 1024, (k & 992) != 0, (k & 31) != 0
    odd = tl.where(nan | (pos & neg), float("nan"), tl.where(pos, float("inf"), float("-inf")))
    return tl.where(acc >= 1.298074214633707e33, odd, acc * 33554432.0)


'''
CODED = [(_SUMS + _ATOMICS, "                s = _coded_sums(tl.where(same, 1.0, 0.0), v, R, "
                           "BD, PARTS)\n" + _SUM_ATOMIC)]


CODES = {"coded sums": CODED}
# the third run's forms (--forms flags): the combined rows' infinities' atomic behind a
# branch taken by the whole block where one of its values is not finite (no per-element
# atomic runs on finite blocks); or, as well, the sums' product on the values as loaded
_BRANCH = "                if tl.max((fin == 0).to(tl.int32)) > 0:\n"
BLOCK_BRANCH = [(_INF_ATOMIC, _BRANCH + textwrap.indent(_INF_ATOMIC, "    "))]
_RAW_PRODUCT = _PRODUCT.replace("tl.where(fin, v, 0.0)", "v").replace(
    "tl.where(fin, vn, 0.0)", "vn")  # on the values as loaded
BLOCK_PATHS = [(_SUMS + _ATOMICS,
                _FIN + _BRANCH + textwrap.indent(_PRODUCT + _ATOMICS, "    ") +
                "                else:\n" + textwrap.indent(_RAW_PRODUCT + _SUM_ATOMIC, "    "))]
# or the product on the values as loaded, and only where a sum is not finite (some value in
# the block is not, or the sums overflow) the shipped sums again, from values loaded again
_RELOAD = textwrap.indent(_LOAD.replace("vn = ", "v = ").replace(
    "other=0)  # not waiting for the indices", "other=0).to(tl.float32)"), " " * 12)
CHECKED = [(_SUMS + _ATOMICS,
            _RAW_PRODUCT +
            "                if tl.max(((tl.abs(s) < float(\"inf\")) == 0).to(tl.int32)) > 0:\n"
            + _RELOAD + textwrap.indent(_SUMS + _INF_ATOMIC, "    ") + _SUM_ATOMIC)]
FLAGS = {"block branch": BLOCK_BRANCH, "block paths": BLOCK_PATHS,
         "checked product": CHECKED}
# the fifth run's forms (--forms order): the infinities' atomic before the product, so that
# the values' registers are free before the product's; (edits, register cap) where capped
FIRST = [(_SUMS + _ATOMICS, _FIN + _INF_ATOMIC + _PRODUCT + _SUM_ATOMIC)]
ORDER = {"infinities first": FIRST, "infinities first, 48 registers": (FIRST, 48),
         "shipped, 48 registers": ([], 48), "no non-finite adds": NO_NONFINITE}
# the sixth run's forms (--forms rows): the infinities' atomic masked by rows (odd: a row
# holding one), so that its mask is constant over four elements and it adds four a
# predicated instruction
_ODD = "                odd = tl.max((fin == 0).to(tl.int32), axis=1) > 0\n"
_ROW_ATOMIC = ("                tl.atomic_add(dst[:, None] + c[None, :], tl.where(fin, 0.0, v),\n"
               "                              mask=(ok & odd)[:, None] & cm[None, :], "
               "sem=\"relaxed\")\n")
_WHOLE_ATOMIC = _ROW_ATOMIC.replace("tl.where(fin, 0.0, v)", "v")
ROW_MASKS = [(_FIN, _FIN + _ODD), (_INF_ATOMIC, _ROW_ATOMIC)]
ROW_FIRST = [(_SUMS + _ATOMICS, _FIN + _ODD + _ROW_ATOMIC + _PRODUCT + _SUM_ATOMIC)]
WHOLE_FIRST = [(_SUMS + _ATOMICS, _FIN + _ODD + _WHOLE_ATOMIC + _PRODUCT.replace(
    "tl.where(fin, v, 0.0)", "tl.where(odd[:, None], 0.0, v)").replace(
    "tl.where(fin, vn, 0.0)", "tl.where(odd[:, None], 0.0, vn)") + _SUM_ATOMIC)]
ROW_FORMS = {"row masks": ROW_MASKS, "row masks, infinities first": ROW_FIRST,
             "odd rows whole, first": WHOLE_FIRST, "no non-finite adds": NO_NONFINITE}
# the seventh run's forms (--forms prologue): the indices' prologue. Their row and "in
# range" from the low 32 bits of each index, where every row in range fits, and only the
# block's "out of range" (its poison) from all 64 (``32-bit rows``); the indices loaded
# once, as a [R, 8] tile reduced to [R]: Triton then converts the rows to each layout that
# uses them, not loading and checking them again in each (``indices once``); both; and
# both with the compare matrix on one key a row (the row, or -1 - j out of range)
_ROWS = "    i, ok, bad = _rows_of(idx, r, n, rows, WIDE)\n"
_ONCE = ("    rm = r < n\n"
         "    z = tl.arange(0, 8)[None, :] * 0\n"
         "    raw = tl.max(tl.load(idx + r[:, None] + z, mask=rm[:, None], other=0), axis=1)\n")
_ONE_LOAD = "    rm = r < n\n    raw = tl.load(idx + r, mask=rm, other=0)\n"
_WRAP64 = ("    i, bad = _wrapped(raw, rm, rows)\n"
           "    if not WIDE:\n        i = i.to(tl.int32)\n"
           "    ok = rm & (bad == 0)\n")


def _wrap32(i: str, ok: str, check: bool = True, wide: bool = True) -> str:
    """Source that wraps ``raw`` into row ``i`` and "in range" ``ok`` from its low 32 bits
    (``check``: also ``bad`` from all 64; ``wide``: ``i`` int64 where WIDE)."""
    return ("    lo = raw.to(tl.int32)\n"
            f"    {i} = tl.where(lo < 0, lo + rows, lo)\n"
            f"    {ok} = rm & ({i}.to(tl.uint32, bitcast=True) < rows.to(tl.uint32))\n"
            + ("    bad = rm & ((raw < -rows) | (raw >= rows))\n" if check else "")
            + (f"    if WIDE:\n        {i} = {i}.to(tl.int64)\n" if wide else ""))


_WRAP32 = _wrap32("i", "ok")
_SAME = "    same = (i[:, None] == i[None, :]) & ok[:, None] & ok[None, :]\n"
_KEY = "    key = tl.where(ok, i, -1 - j)\n    same = key[:, None] == key[None, :]\n"
PROLOGUE = {"32-bit rows": [(_ROWS, _ONE_LOAD + _WRAP32)],
            "indices once": [(_ROWS, _ONCE + _WRAP64)],
            "indices once, 32-bit rows": [(_ROWS, _ONCE + _WRAP32)],
            "indices once, 32-bit rows, keys": [(_ROWS, _ONCE + _WRAP32), (_SAME, _KEY)]}
# the compare matrix, its reductions and the poison from the indices loaded once, and the
# copies' addresses from a load of their own in the values' layout (no conversion there)
_SPLIT = (_ONCE + _wrap32("ki", "kok", wide=False) +
          "    raw = tl.load(idx + r, mask=rm, other=0)\n" + _wrap32("i", "ok", check=False))
_FIRST = "    first = ok & (tl.max("
PROLOGUE["keys once, addresses apart"] = [
    (_ROWS, _SPLIT), (_SAME, _KEY.replace("tl.where(ok, i,", "tl.where(kok, ki,")),
    (_FIRST, _FIRST.replace("ok &", "kok &"))]
PROLOGUE["keys once, addresses apart, infinities first"] = \
    PROLOGUE["keys once, addresses apart"] + FIRST
# with the infinities' atomic first (ORDER's), uncapped and at 48 registers (no spill: ten
# blocks an SM where 64 registers fit eight)
PROLOGUE["keys, infinities first"] = PROLOGUE["indices once, 32-bit rows, keys"] + FIRST
PROLOGUE["keys, infinities first, 48 registers"] = (PROLOGUE["keys, infinities first"], 48)
# the eighth run's forms (--forms vectors): the infinities' atomic masked by aligned groups
# of four columns (a group that holds a non-finite value adds it, zeros elsewhere), the
# groups' flags reduced within a thread and restated as constant over four columns
# (tl.max_constancy: Triton's analysis loses it through the reshape), so that the atomic
# adds four values a predicated vector instruction; after the product or before it
_GROUPS = ("                odd = tl.reshape(tl.broadcast_to(tl.max(tl.reshape(\n"
           "                    (fin == 0).to(tl.int32), [R, BD // 4, 4]), axis=2)[:, :, None],\n"
           "                    [R, BD // 4, 4]), [R, BD]) > 0\n"
           "                odd = tl.max_constancy(odd, [1, 4])\n")
_GROUP_ATOMIC = _GROUPS + _ROW_ATOMIC.replace("(ok & odd)[:, None] & cm[None, :]",
                                              "ok[:, None] & cm[None, :] & odd")
_GROUP_FIRST = [(_SUMS + _ATOMICS, _FIN + _GROUP_ATOMIC + _PRODUCT + _SUM_ATOMIC)]
VECTORS = {"group masks": [(_INF_ATOMIC, _GROUP_ATOMIC)],
           "group masks, infinities first": _GROUP_FIRST,
           "group masks, infinities first, keys once, addresses apart":
               PROLOGUE["keys once, addresses apart"] + _GROUP_FIRST,
           "no non-finite adds": NO_NONFINITE}
# --forms ncu: the shipped kernel, then these, for Nsight Compute
NCU_FORMS = {"infinities first": FIRST, "row masks, infinities first": ROW_FIRST,
             "odd rows whole, first": WHOLE_FIRST, "no non-finite adds": NO_NONFINITE}
# the fourth run's form (--forms own): where the plan adds in the output's dtype, a loop of
# its own, before the rows' compare matrix, its reduction and the copies' addresses,
# which only the other paths compute
_COMPARE = ("    # same[a, b]: rows a and b add to one output row; first: the first row of each\n"
            "    same = (i[:, None] == i[None, :]) & ok[:, None] & ok[None, :]\n"
            "    first = ok & (tl.max((same & (j[None, :] < j[:, None])).to(tl.int32), "
            "axis=1) == 0)\n")
_OWN_READ = "    own = False\n    if OWN:\n        own = tl.load(state + 3) != 0\n"
_OWN_ADD = ("            tl.atomic_add(out + (i * D)[:, None] + c[None, :], vn,\n"
            "                          mask=ok[:, None] & cm[None, :], sem=\"relaxed\")\n")
_OWN_BRANCH = "        if own:\n" + _OWN_ADD + "        elif combine:\n"
_OWN_LOOP = ("    if own:\n"
             "        for c0 in range(0, D, BD):\n"
             "            c = c0 + tl.arange(0, BD)\n"
             "            cm = c < D\n"
             "            vn = tl.load(vals + r[:, None] * D + c[None, :],\n"
             "                         mask=(r < n)[:, None] & cm[None, :], other=0)\n"
             + _OWN_ADD + "    else:\n")


def own_first(compare_first: bool = False) -> list:
    """The edit that gives the own adds their loop (``_OWN_LOOP``) right after the plan is
    read, the shipped code after it its ``else`` (without its own branch); the rows'
    compare matrix moved into that ``else`` (``compare_first``: left before the wait)."""
    src = textwrap.dedent(inspect.getsource(wide._scatter.fn))
    start = src.index(_COMPARE)
    head, rest = src[start:].split(_OWN_READ)
    assert rest.count(_OWN_BRANCH) == 1
    rest = rest.replace(_OWN_BRANCH, "        if combine:\n")
    if compare_first:
        return [(src[start:], head + _OWN_READ + _OWN_LOOP + textwrap.indent(rest, "    "))]
    return [(src[start:], head.replace(_COMPARE, "") + _OWN_READ + _OWN_LOOP +
             textwrap.indent(_COMPARE + rest, "    "))]


def registers() -> list:
    """[module, registers a thread, spills] of each ``_scatter`` compiled so far (the shipped
    kernel's module, or a form's file)."""
    found = []
    for obj in gc.get_objects():
        if type(obj).__name__ == "CompiledKernel" and getattr(obj, "name", "") == "_scatter":
            fn = getattr(getattr(obj, "src", None), "fn", None)
            module = getattr(getattr(fn, "fn", None), "__module__", "?")
            found.append([module, obj.n_regs, obj.n_spills])
    return found


def form_kernel(name: str, edits: list, where: str, kernel=None):
    """The shipped ``kernel`` (None: ``_scatter``) with ``edits`` made, compiled from a file
    in ``where``."""
    kernel = wide._scatter if kernel is None else kernel
    src = textwrap.dedent(inspect.getsource(kernel.fn))
    for old, new in edits:
        assert src.count(old) == 1, (name, old)
        src = src.replace(old, new)
    path = os.path.join(where, "form_" + "".join(ch if ch.isalnum() else "_" for ch in name)
                        + ".py")
    with open(path, "w") as f:
        f.write(_HEADER + (_CODED if "_coded_sums" in src else "") + src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel.fn.__name__)


class Capped(Launcher):
    """A ``Launcher`` whose kernel compiles with at most ``regs`` registers a thread."""

    def __init__(self, fn, regs: int):
        super().__init__(fn)
        self.regs = regs

    def _jit(self, grid, args, consts, warps, opts, ordered):
        super()._jit(grid, args, consts, warps, {**opts, "maxnreg": self.regs}, ordered)

    def _probe(self, grid, args, consts, warps, opts, ordered=None):
        return super()._probe(grid, args, consts, warps, {**opts, "maxnreg": self.regs},
                              ordered)


def forms(where: str, which: dict, no_pdl: bool) -> dict:
    """{name: fn(out, idx, vals, P)}: the op as shipped, each of ``which`` (edits, or
    (edits, register cap)), and no PDL."""
    calls = {"shipped": lambda o, i, v, P: torch.ops.commrt.partitioned_index_put(o, i, v, P)}
    for name, edits in which.items():
        edits, regs = edits if isinstance(edits, tuple) else (edits, None)
        kernel = form_kernel(name, edits, where)
        lau = Launcher(kernel) if regs is None else Capped(kernel, regs)
        calls[name] = with_constants(wide, run_scatter=lau)
    if no_pdl:
        calls["no PDL"] = with_constants(wide, has_pdl=lambda device: False)
    return calls


def seed_data(k: int, n: int) -> tuple:
    """(out, idx, vals, copies) of one of the seed's scatters: ``n`` indices from 0..k."""
    g = torch.Generator(device=DEV).manual_seed(k)
    out = torch.randn(ROWS, D, device=DEV, generator=g)
    vals = torch.randn(n, D, device=DEV, generator=g)
    idx = torch.randint(0, k + 1, (n,), device=DEV, generator=g)
    P = pass_scatter.copies(ROWS, D, n, F32, torch.cuda.get_device_properties(DEV).total_memory)
    return out, idx, vals, P


def seed_cell(variants: dict, old, k: int, n: int) -> dict:
    out, idx, vals, P = seed_data(k, n)
    ours = {name: lambda fn=fn: fn(out, idx, vals, P) for name, fn in variants.items()}
    if old is not None:
        ours["before"] = lambda: old.partitioned_index_add(out, idx, vals, P)
    # infinities and NaN among combined rows: each form's non-finite entries exactly those
    # of float64's, the rest within its bound
    odd = vals.clone()
    odd[3, 7], odd[5, 9], odd[6, 7], odd[8, 1] = float("inf"), float("-inf"), float("nan"), \
        float("inf")
    want = out.double().index_add(0, idx, odd.double())
    fin = want.isfinite()
    for name, fn in variants.items():
        if "non-finite" in name:
            continue
        got = fn(out, idx, odd, P).double()
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(
            got[~fin & ~want.isnan()], want[~fin & ~want.isnan()]), (name, "non-finite")
        assert (got[fin] - want[fin]).norm() < 1e-5 * want[fin].norm(), (name, "finite")
    ref = out.double().index_add(0, idx, vals.double())
    _, parted = inductor_columns(out, idx, vals)
    calls = {**ours, "inductor partitioned": lambda: parted(out, idx, vals)}
    row = {"k": k, "n": n, "partitions": P,
           "err": checked_errors(calls, ref, 1e-5, lambda name: name in ours)}
    row.update(rounds(calls, ROUNDS))
    row["kernels"] = {name: kernel_us(fn, names=None) for name, fn in calls.items()}
    row["registers"] = registers()
    return row


def profiled(variants: dict, n: int) -> None:
    """Each of ``variants`` called on the seed's shape at k = 0, two rounds in turn (the
    first compiles), for a profiler outside (``--forms ncu``)."""
    out, idx, vals, P = seed_data(0, n)
    for _ in range(2):
        for fn in variants.values():
            fn(out, idx, vals, P)
            torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    old_option(ap)
    ap.add_argument("--seed-n", type=int, default=1_000_000)
    ap.add_argument("--forms", choices=("edits", "hints", "codes", "flags", "own", "order",
                                        "rows", "prologue", "vectors", "ncu",
                                        "registers"),
                    default="edits", help="FORMS and no PDL on every cell, HINTS on the "
                    "seed's, CODES, FLAGS, the own adds first, ORDER, ROW_FORMS, PROLOGUE or "
                    "VECTORS on every cell, the shipped kernel and the floor for Nsight "
                    "Compute, or the shipped kernel alone on the grid's cells with its "
                    "registers")
    ap.add_argument("--profiled", action="store_true", help="no timing: the shipped kernel "
                    "and the forms called as with --forms ncu, for Nsight Compute")
    ap.add_argument("--out", default="probe_scatter_forms.json")
    args = ap.parse_args()
    old, old_flags = old_kernels(args)
    command = "python benchmarks/probes/probe_scatter_forms.py" + old_flags + (
        f" --forms {args.forms}" if args.forms != "edits" else "")
    hints = args.forms == "hints"
    which = {"edits": FORMS, "hints": HINTS, "codes": CODES, "flags": FLAGS,
             "own": {"own adds first": own_first(),
                     "own adds first, compare before the wait": own_first(True)},
             "order": ORDER, "rows": ROW_FORMS, "prologue": PROLOGUE, "vectors": VECTORS,
             "ncu": NCU_FORMS,
             "registers": {}}[args.forms]
    result = {"meta": dict(meta(command, "µs a call (median of rounds, each a CUDA graph of "
                                "20 calls); kernels: µs, profiler, median of 20 eager calls"),
                           before=args.old_commit), "seed": [], "grid": []}

    def save(row, part):
        result[part].append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    with tempfile.TemporaryDirectory() as where:
        variants = forms(where, which, args.forms == "edits")
        if args.forms == "ncu" or args.profiled:
            return profiled(variants, args.seed_n)
        for n in (args.seed_n, args.seed_n // 4) if args.forms != "registers" else ():
            for k in KS:
                save(seed_cell(variants, old, k, n), "seed")
        if hints:
            return
        inductor("index_put")  # compiled once before the grid's cells
        for dtype, width, rows, dist in GRID:
            row = variant_rounds(dtype, width, rows, dist, dict(variants), ROUNDS)
            save({**row, "registers": registers()}, "grid")


if __name__ == "__main__":
    main()
