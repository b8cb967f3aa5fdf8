"""Registering commrt's FX passes with torch.compile.

``install()`` sets Inductor's ``post_grad_custom_post_pass`` to a ``CustomGraphPass``
whose ``uuid()`` names the passes and their versions (so the FX graph cache keeps
working), running after any pass the user had registered there. ``backend`` is an
``aot_eager``-style torch.compile backend that runs the same passes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from .adopt import adopt_all_reduces
from .fuse_rmsnorm import fuse_allreduce_rmsnorm
from .overlap import overlap_and_bucket
from .scatter import partitioned_scatter

# In the order they run: fusing first, so that the overlap pass sees the fused ops; adopting
# last, so that only the all-reduces the overlap pass left exposed become commrt's op.
PASSES = {"fuse_rmsnorm": fuse_allreduce_rmsnorm, "partitioned_scatter": partitioned_scatter,
          "overlap": overlap_and_bucket, "adopt": adopt_all_reduces}
last_reports: list = []  # the reports of the most recent graphs (newest last, at most 16)


class CommrtPass(CustomGraphPass):
    """commrt's passes, after ``previous`` (another custom pass, or None)."""

    def __init__(self, passes: tuple[str, ...], previous=None, comm_ctas: int = 0,
                 bucket_cap: int | None = None, copy_engine: bool = False,
                 memory_budget: int | None = None):
        unknown = sorted(set(passes) - set(PASSES))
        if unknown:
            raise ValueError(f"unknown commrt FX pass {unknown}; known: {sorted(PASSES)}")
        self.passes = passes
        self.previous = previous
        self.comm_ctas = comm_ctas
        self.copy_engine = copy_engine
        self.bucket_cap = bucket_cap
        self.memory_budget = memory_budget
        self.notes: list[str] = []  # why a group got no copy (``comm_groups``)

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.previous is not None:
            self.previous(graph)
        for name in self.passes:
            kw = {}
            if name == "overlap":
                kw = {"for_inductor": True, "comm_ctas": self.comm_ctas,
                      "copy_engine": self.copy_engine}
                if self.bucket_cap is not None:
                    kw["bucket_cap"] = self.bucket_cap
                if self.memory_budget is not None:
                    kw["memory_budget"] = self.memory_budget
            report = PASSES[name](graph, **kw)
            if name == "overlap":
                report.skipped += self.notes
            last_reports.append((name, report))
        del last_reports[:-16]

    def uuid(self) -> bytes:
        """Changes with the passes chosen, their source code and the chained pass."""
        from torch._inductor.custom_graph_pass import get_hash_for_files

        from .. import copy_engine_group
        from ..symm_mem import copy_engine
        from . import adopt, comm_groups

        prev = self.previous.uuid() if isinstance(self.previous, CustomGraphPass) else None
        here = os.path.dirname(os.path.abspath(__file__))
        passes = sorted(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py"))
        code = get_hash_for_files((*passes, copy_engine_group.__file__, copy_engine.__file__))
        if {"adopt", "overlap"} & set(self.passes):  # both read the communicators
            code += adopt.state_key()
        blob = (f"commrt-fx/{','.join(self.passes)}/{prev!r}/{self.comm_ctas}/"
                f"{self.copy_engine}/"
                f"{self.bucket_cap}/{self.memory_budget}/"
                f"{comm_groups.known()!r}").encode() + code
        return hashlib.sha256(blob).digest()


def install(fuse_rmsnorm: bool = True, overlap: bool = True,
            partitioned_scatter: bool | None = None, comm_ctas: int | None = None,
            comm_groups=None, bucket_cap: int | None = None,
            copy_engine: bool | None = None, memory_budget: int | None = None,
            adopt: bool = True) -> CommrtPass:
    """Register commrt's passes as Inductor's post-grad custom pass; returns the pass.

    ``partitioned_scatter`` defaults to ``COMMRT_PARTITIONED_SCATTER`` (off).
    ``comm_ctas`` (default ``COMMRT_FX_COMM_CTAS``, 0: off) runs the graphs' functional
    collectives on copies of ``comm_groups`` (default: the world group) whose NCCL
    communicator takes at most that many CTAs; the copies are made here, so with a limit
    every rank must call ``install`` (in the same order, as for ``new_group``).
    ``copy_engine`` (default ``COMMRT_FX_COPY_ENGINE``, off; auto: on where the groups are two
    NCCL ranks on GPUs, ``comm_groups.copy_engine_by_default``) runs their sum and avg
    all-reduces that have compute to hide behind on a copy-engine group instead
    (``commrt.copy_engine_group``; also made here, with a symmetric workspace of
    ``COMMRT_MAX_CUSTOM_BYTES``): between two ranks as exchanges, each rank's data packed
    into a symmetric landing buffer that the peer's copy engines read, plus a sum the
    compute does. The landing buffers hold every exchanged byte of the largest graph (the
    gradients, for a data-parallel step) for the life of the process. Beyond two ranks as
    all-gathers, whose outputs double the bytes in flight.
    ``bucket_cap``: the largest bucket in bytes (default ``overlap.BUCKET_CAP_BYTES``).
    ``memory_budget``: bytes the pass may add to a graph's peak (default: 5% of it).
    ``adopt``: functional all-reduces left exposed that commrt's kernels would run become
    ``commrt::all_reduce`` (``commrt.fx.adopt``; groups with a communicator only).
    """
    import torch._inductor.config as inductor_config

    from commrt import config

    from . import comm_groups as _groups

    if partitioned_scatter is None:
        partitioned_scatter = config.get().partitioned_scatter
    if comm_ctas is None:
        comm_ctas = config.get().fx_comm_ctas
    if copy_engine is None:
        copy_engine = config.get().fx_copy_engine
    auto, notes = copy_engine is None, []
    if auto:
        copy_engine, why = (False, "a CTA limit is set") if comm_ctas else \
            _groups.copy_engine_by_default(comm_groups)
        if not copy_engine:
            notes.append(f"copy engine off (auto): {why}")
    if isinstance(comm_ctas, bool) or not isinstance(comm_ctas, int) or \
            not 0 <= comm_ctas <= 64:
        raise ValueError(f"comm_ctas={comm_ctas!r}: expected 0 (no limit) to 64 CTAs")
    if memory_budget is not None and (isinstance(memory_budget, bool) or
                                      not isinstance(memory_budget, int) or memory_budget < 0):
        raise ValueError(f"memory_budget={memory_budget!r}: expected a number of bytes >= 0")
    if bucket_cap is not None and (not isinstance(bucket_cap, int) or bucket_cap <= 0):
        raise ValueError(f"bucket_cap={bucket_cap!r}: expected a positive number of bytes")
    kind = _groups.variant(comm_ctas, bool(copy_engine))
    if kind and overlap:
        try:
            notes += _groups.make_copies(kind, comm_groups)
        except Exception as exc:  # noqa: BLE001 (auto falls back to the groups themselves)
            if not auto:
                raise
            notes.append(f"copy engine off (auto): its group could not be made: {exc}")
            copy_engine = False
    wanted = {"fuse_rmsnorm": fuse_rmsnorm, "partitioned_scatter": partitioned_scatter,
              "overlap": overlap, "adopt": adopt}
    passes = tuple(n for n in PASSES if wanted[n])
    current = inductor_config.post_grad_custom_post_pass
    if isinstance(current, CommrtPass):
        current = current.previous
    p = CommrtPass(passes, current, comm_ctas if overlap else 0, bucket_cap,
                   bool(copy_engine) and overlap, memory_budget)
    p.notes = notes
    inductor_config.post_grad_custom_post_pass = p
    return p


def uninstall() -> None:
    """Restore whatever custom pass was registered before ``install()``."""
    import torch._inductor.config as inductor_config

    current = inductor_config.post_grad_custom_post_pass
    if isinstance(current, CommrtPass):
        inductor_config.post_grad_custom_post_pass = current.previous


@contextlib.contextmanager
def installed(**options):
    """``with commrt.fx.installed(): torch.compile(model)(...)``."""
    import torch._inductor.config as inductor_config

    before = inductor_config.post_grad_custom_post_pass
    install(**options)
    try:
        yield
    finally:
        inductor_config.post_grad_custom_post_pass = before


def _aot_eager_with_passes():
    from torch._dynamo.backends.common import aot_autograd

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        from commrt import config

        for name in PASSES:
            if name == "partitioned_scatter" and not config.get().partitioned_scatter:
                continue
            last_reports.append((name, PASSES[name](gm)))
        del last_reports[:-16]
        return gm.forward

    return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph)


def backend(gm, example_inputs):
    """torch.compile backend: aot_eager with commrt's passes (no Inductor)."""
    return _aot_eager_with_passes()(gm, example_inputs)
