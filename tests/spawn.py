"""Run a function on N gloo (or NCCL) processes and collect what each rank returns."""

from __future__ import annotations

import faulthandler
import os
import queue as queue_mod
import socket
import time
import traceback

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, backend, fn, args, env, queue, dump_after):
    import torch
    import torch.distributed as dist

    # a rank still running when the parent gives up prints where it is (in pytest's report)
    faulthandler.dump_traceback_later(dump_after, exit=False)
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    try:
        kwargs = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)
        import commrt.config

        commrt.config.reload()
        queue.put((rank, "ok", fn(rank, world, *args)))
    except BaseException as exc:  # report, never hang the parent
        queue.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        faulthandler.cancel_dump_traceback_later()
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def run(fn, world: int = 2, *args, backend: str = "gloo", env: dict | None = None,
        env_by_rank: list[dict] | None = None, timeout: float = 180.0) -> list:
    """Each rank's return value of ``fn(rank, world, *args)``; raises if a rank failed."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    envs = [{**(env or {}), **(env_by_rank[r] if env_by_rank else {})} for r in range(world)]
    # SPAWN_DUMP_AFTER=seconds: every rank prints its stacks then (a slow run's whereabouts)
    dump_after = float(os.environ.get("SPAWN_DUMP_AFTER", 0)) or max(1.0, timeout - 10)
    procs = [ctx.Process(target=_worker, args=(r, world, port, backend, fn, args, envs[r],
                                               queue, dump_after))
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < world:
            try:
                rank, status, value = queue.get(timeout=2)
            except queue_mod.Empty:
                dead = [f"rank {r} exited with code {p.exitcode} without reporting"
                        for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    errors += dead or [f"ranks did not report within {timeout} s"]
                    break
                continue
            if status == "ok":
                results[rank] = value
            else:
                errors.append(f"rank {rank}: {value}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return [results[r] for r in range(world)]
