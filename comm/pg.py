"""The process group's own collectives, as torch defines them.

``commrt.patch()`` replaces ``torch.distributed.all_reduce``, ``all_gather_into_tensor``
and ``reduce_scatter_tensor`` with functions that route through commrt; commrt's own
process-group path must not come back through them. This module keeps the functions torch
had when commrt was first imported, whatever is patched over them later: call
``commrt.pg.all_reduce`` / ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` wherever
commrt means the process group.
"""

from __future__ import annotations

import torch.distributed.distributed_c10d as _c10d

all_reduce = _c10d.all_reduce
all_gather_into_tensor = _c10d.all_gather_into_tensor
reduce_scatter_tensor = _c10d.reduce_scatter_tensor
