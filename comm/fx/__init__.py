"""commrt's compiler-side passes on aten FX graphs.

    commrt.fx.install()                    # Inductor post-grad pass (FX cache friendly)
    with commrt.fx.installed(): ...        # the same, scoped
    torch.compile(m, backend=commrt.fx.backend)   # aot_eager + commrt's passes
    commrt.fx.fuse_allreduce_rmsnorm(gm)   # one pass, standalone, on a GraphModule
    commrt.fx.overlap_and_bucket(gm)       # bucket and reorder collectives -> OverlapReport
    commrt.fx.partitioned_scatter(gm)      # contended index_put / index_add
"""

from .fuse_rmsnorm import FusionReport, fuse_allreduce_rmsnorm
from .overlap import OverlapReport, overlap_and_bucket
from .registration import CommrtPass, backend, install, installed, last_reports, uninstall
from .scatter import ScatterReport, partitioned_scatter

__all__ = ["CommrtPass", "FusionReport", "OverlapReport", "ScatterReport", "backend",
           "fuse_allreduce_rmsnorm", "install", "installed", "last_reports",
           "overlap_and_bucket", "partitioned_scatter", "uninstall"]
