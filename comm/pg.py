"""The process group's own collectives, as torch defines them.

``commrt.patch()`` replaces ``torch.distributed.all_reduce`` with a function that routes
through commrt; commrt's own process-group path must not come back through it. This
module keeps the function torch had when commrt was first imported, whatever is patched
over it later: call ``commrt.pg.all_reduce`` wherever commrt means the process group.
"""

from __future__ import annotations

import torch.distributed.distributed_c10d as _c10d

all_reduce = _c10d.all_reduce
