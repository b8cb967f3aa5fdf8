"""Kernels under TRITON_INTERPRET=1 with one CPU process per rank over shared memory.

Each rank's workspace is a named shared-memory block that every process maps itself, so
the pointer tables, signal pads and remote loads/stores are real, and ranks run
concurrently: barriers and Lamport polls really wait for each other. ``spawn_ranks``
is the parent's side; ``serve_rank`` the common part of every rank body (imported by
plain name so that spawned ranks can unpickle the bodies).
"""

from __future__ import annotations

import io
import os
import queue as queue_mod
import time
import traceback
from collections.abc import Callable

import torch

DATA_BYTES = 64 * 1024
SLOT_BYTES = 16 * 1024


def serve_rank(rank: int, names: list[str], barrier, queue,
               calls: Callable[[object], list]) -> None:
    """Map every rank's block, clear this rank's workspace, meet the others, then put
    ``(rank, outputs, error flag)`` for ``calls(workspace)`` on ``queue`` (or the error)."""
    try:
        from multiprocessing import shared_memory

        from commrt.symm_mem.workspace import Workspace

        blocks = [shared_memory.SharedMemory(name=n) for n in names]  # attach by name
        buffers = [torch.frombuffer(b.buf, dtype=torch.uint8) for b in blocks]
        ws = Workspace(buffers, rank, DATA_BYTES, SLOT_BYTES, "interp")
        ws.clear()
        barrier.wait()
        outs = calls(ws)
        blob = io.BytesIO()
        torch.save(outs, blob)  # bytes, not shared tensors: this process exits next
        queue.put((rank, blob.getvalue(), int(ws.err.item())))
        del ws, buffers
        for b in blocks:
            b.close()
    except BaseException as exc:
        queue.put((rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", -1))


def spawn_ranks(body: Callable, world: int, cases, skip=()) -> list[tuple[list, int]]:
    """Each rank's (outputs, error flag) of ``body(rank, world, names, cases, barrier,
    queue, skip)``, run in ``world`` spawned processes under the interpreter."""
    from multiprocessing import shared_memory

    import torch.multiprocessing as mp

    from commrt.symm_mem.workspace import Workspace

    ctx = mp.get_context("spawn")
    total = Workspace.total_bytes(world, DATA_BYTES, SLOT_BYTES)
    blocks = [shared_memory.SharedMemory(create=True, size=total) for _ in range(world)]
    barrier, queue = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=body, args=(r, world, [b.name for b in blocks], cases,
                                            barrier, queue, set(skip)))
             for r in range(world)]
    try:
        _start_interpreted(procs)
        return _collect(procs, queue, world)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        for b in blocks:
            b.close()
            b.unlink()


def _start_interpreted(procs) -> None:
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # inherited by the children at start
    try:
        for p in procs:
            p.start()
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


def _collect(procs, queue, world: int) -> list[tuple[list, int]]:
    got = {}
    deadline = time.monotonic() + 600
    while len(got) < world:
        try:
            rank, outs, err = queue.get(timeout=2)
        except queue_mod.Empty:
            dead = [f"rank {r} exited with code {p.exitcode}" for r, p in enumerate(procs)
                    if r not in got and p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise AssertionError("; ".join(dead) or "ranks timed out") from None
            continue
        if isinstance(outs, str):
            raise AssertionError(f"rank {rank} failed:\n{outs}")
        got[rank] = (torch.load(io.BytesIO(outs)), err)
    return [got[r] for r in range(world)]
