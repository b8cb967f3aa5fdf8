"""Why does the scatter grid read commrt's compiled graph slower than a fresh process does?

One GPU. The grid at 3ee81bb read fp32 rows of 16 into 1,024 rows, uniform, at 13.3 µs in
each of its five graphs; ``probe_init_pdl.py`` read the same kernels, compiled the same
way, at 11.4 in a fresh process (Inductor's scatter 10.8 and 10.7 in the two). A grid
worker compiles all its groups before it times any, so its scratch for the extra copies
(``scatter_scratch.zeroed``) has grown to the largest group's need, and it holds every
group's data. Here the same cells are timed, in one process, in states taken in turn:
"fresh"; "grown scratch" (``zeroed`` grown to ``GROWN`` fp32 elements first on every
stream of torch's pool, from which each capture takes its side stream, and so its own
scratch); "held memory" (also ``HELD`` bytes of other tensors kept alive, in pieces);
"other processes" (``OTHERS`` more processes with a CUDA context on the GPU, idle, as the
grid's other workers are while one times); each state keeps the ones before. Variants:
the op, and ``index_put`` compiled with the pass ("compiled"); against Inductor's plain
scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of five rounds taken
in turn; spread: the least and most)::

    python benchmarks/probes/probe_grid_state.py [--out probe_grid_state.json]
"""

from __future__ import annotations

import subprocess
import sys

import torch
from probe_init_pdl import compiled
from probe_narrow_costs import checked_rounds, run_cells

from commrt.fx.scatter_scratch import zeroed

ROUNDS = 5
F32 = torch.float32
GROWN, STREAMS = 1 << 28, 32  # fp32 elements (1 GiB) on each of the pool's streams
HELD, PIECE = 16 << 30, 256 << 20
OTHERS = 13
STATES = ("fresh", "grown scratch", "held memory", "other processes")
CELLS = [(F32, 16, 1024, "uniform"), (F32, 100, 1024, "uniform"),
         (F32, 0, 65536, "uniform")]
_held: list[torch.Tensor] = []
_others: list[subprocess.Popen] = []
IDLE = "import torch, time; torch.zeros(1, device='cuda'); print(flush=True); time.sleep(900)"


def enter(state: str) -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    if state in ("grown scratch", "held memory"):
        for _ in range(STREAMS):
            with torch.cuda.stream(torch.cuda.Stream(dev)):
                zeroed(dev, GROWN)
        torch.cuda.synchronize(dev)
    if state == "held memory" and not _held:
        _held.extend(torch.empty(PIECE, dtype=torch.uint8, device=dev)
                     for _ in range(HELD // PIECE))
    if state == "other processes" and not _others:
        _others.extend(subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE)
                       for _ in range(OTHERS))
        for p in _others:  # each has its context
            p.stdout.readline()


def cell(dtype, width: int, rows: int, dist: str, state: str) -> dict:
    enter(state)
    torch._dynamo.reset()
    variants = {"op": torch.ops.commrt.partitioned_index_put, "compiled": compiled(False)}
    return {"state": state, **checked_rounds(dtype, width, rows, dist, variants, ROUNDS)}


def main() -> None:
    try:
        run_cells(__doc__, "probe_grid_state.json", [(*c, s) for s in STATES for c in CELLS],
                  cell, f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")
    finally:
        for p in _others:
            p.kill()


if __name__ == "__main__":
    main()
