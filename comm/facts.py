"""What a ``Communicator``'s dispatcher decides from, gathered once and agreed by every rank.

``build_profile`` all-gathers each rank's device facts and host into the group's device
profile; ``gather_facts`` finds the tuning table, says why custom kernels cannot run (if they
cannot), allocates the symmetric workspace when they can and probes ``nccl_symm``; and
``agree`` compares all of it across the ranks, so that every rank takes the same
decisions: where they differ, every collective of the group goes to the process group.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import warnings

import torch
import torch.distributed as dist

from commrt import config as _config
from commrt.dispatch import profile as _profile
from commrt.dispatch import table as _table
from commrt.dispatch.dispatcher import Facts
from commrt.symm_mem import nccl_symm as _nccl_symm
from commrt.symm_mem import torch_ops

log = logging.getLogger("commrt")

# one_shot_push receive slot per rank; the tuner finds where push stops winning below it.
PUSH_SLOT_BYTES = 1 << 20


def build_profile(group: dist.ProcessGroup, device: torch.device,
                  world_size: int) -> _profile.DeviceProfile:
    """The group's device profile from every rank's device facts and host."""
    facts = _profile.local_facts() if device.type == "cuda" else \
        _profile.DeviceFacts("cpu", "cpu", "cpu", 0, 0)
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, (socket.gethostname(), facts), group=group)
    hosts = [g[0] for g in gathered]
    all_facts = [g[1] for g in gathered]
    links = _profile.pair_links(all_facts, hosts) if device.type == "cuda" else \
        [["none"] * world_size for _ in range(world_size)]
    return _profile.build_profile(all_facts, links)


def custom_blocked(config: _config.Config, device: torch.device, backend: str,
                         world_size: int, profile: _profile.DeviceProfile) -> str:
    """Why no custom kernel can run on this group ("" when they can)."""
    customs = [a for a in _config.ALGORITHMS if a != "nccl"]
    if all(a in config.disable for a in customs):
        return "COMMRT_DISABLE switches off every custom algorithm"
    if device.type != "cuda":
        return f"the group's backend ({backend}) reduces on the CPU"
    if world_size < 2:
        return "world size 1"
    if not profile.full_mesh:
        return (f"not every pair of the group's GPUs has peer access on one host "
                f"(link: {profile.link})")
    return ""


def nccl_backend(config: _config.Config, device: torch.device, rank: int) -> str:
    """``COMMRT_SYMM_BACKEND=nccl``: make NCCL the process's symmetric-memory backend
    before the workspace is allocated ("" on success or when not asked, else why not)."""
    if config.symm_backend != "nccl" or "nccl_symm" in config.disable:
        return ""
    why = _nccl_symm.use_nccl_backend(device)
    if why:
        log.warning("commrt rank %d: %s", rank, why)
    return why


def gather_facts(group: dist.ProcessGroup, device: torch.device, backend: str, rank: int,
                 world_size: int, profile: _profile.DeviceProfile, config: _config.Config):
    """This rank's facts and the symmetric workspace (None when custom kernels cannot run
    or it could not be set up); ``facts.profile`` is ``profile`` with multicast settled."""
    table = _table.find(profile.generation, world_size, config.table) \
        if profile.vendor != "cpu" or config.table else None
    blocked = custom_blocked(config, device, backend, world_size, profile)
    nccl_symm_why = blocked or nccl_backend(config, device, rank)
    ws = None
    if not blocked:
        try:
            from commrt.symm_mem.workspace import Workspace

            ws = Workspace.allocate(
                group, device, config.max_custom_bytes,
                min(PUSH_SLOT_BYTES, config.max_custom_bytes))
        except Exception as exc:  # symmetric memory unavailable here
            blocked = f"symmetric workspace could not be set up ({type(exc).__name__}: {exc})"
        nccl_symm_why = nccl_symm_why or _nccl_symm.probe(
            _nccl_symm.current_backend(device), ws is not None)
    # The device attribute claims multicast even where binding fails: the handle decides.
    profile = dataclasses.replace(profile, multicast=bool(ws and ws.multicast_ptr))
    facts = Facts(
        profile=profile, world_size=world_size, config=config, table=table,
        custom_blocked=blocked,
        multicast_ptr=bool(ws and ws.multicast_ptr),
        multicast_env_off=_config.multicast_disabled_by_env(),
        symm_ops=torch_ops.available() | torch_ops.collective_ops() if ws else frozenset(),
        workspace_bytes=ws.data_bytes if ws else 0,
        push_bytes=ws.slot_bytes if ws else 0,
        nccl_symm_blocked=nccl_symm_why,
    )
    return facts, ws


def agree_facts(facts: Facts, group: dist.ProcessGroup, group_name: str, rank: int,
                stacklevel: int = 3) -> Facts:
    """Every rank must decide alike: compare what decisions depend on; else all nccl.

    ``nccl_symm`` has its own verdict: one rank that cannot run it (an older NCCL,
    a failed registration) rules it out on every rank, naming that rank. Rank 0 warns
    where the ranks disagree, at ``stacklevel`` as ``warnings.warn`` counts it from here.
    """
    mine = (facts.profile.key(), facts.table.digest if facts.table else None,
            facts.custom_blocked, facts.multicast_ptr, facts.multicast_env_off,
            sorted(facts.symm_ops), facts.workspace_bytes, facts.push_bytes,
            facts.config.describe())
    gathered: list = [None] * facts.world_size
    dist.all_gather_object(gathered, (mine, facts.nccl_symm_blocked), group=group)
    facts = dataclasses.replace(
        facts, nccl_symm_blocked=_nccl_symm.agree([g[1] for g in gathered]))
    theirs = [g[0] for g in gathered]
    if all(g == mine for g in theirs):
        return facts
    fields = ("device profile", "tuning table", "custom-kernel availability", "multicast",
              "multicast env", "torch symm ops", "workspace size", "push size", "config")
    differ = [f for i, f in enumerate(fields) if any(g[i] != mine[i] for g in theirs)]
    why = "ranks disagree on " + ", ".join(differ)
    blocked = [(r, g[2]) for r, g in enumerate(theirs) if g[2]]
    if blocked and "custom-kernel availability" in differ:
        why += f" (rank {blocked[0][0]}: {blocked[0][1]})"
    if rank == 0:
        warnings.warn(f"commrt: {why}; every collective of group {group_name} goes "
                      "to the process group", stacklevel=stacklevel)
    return dataclasses.replace(facts, table=None, custom_blocked=why)
