"""NCCL's symmetric kernels (NCCL 2.27+) on the commrt workspace: ``nccl_symm``.

A buffer allocated while PyTorch's symmetric-memory backend is ``"NCCL"`` and rendezvoused
is registered as an NCCL window; ``dist.all_reduce`` on a tensor inside it (at the same
offset on every rank) runs NCCL's symmetric kernels. The same handle gives peer pointers,
so commrt's kernels and PyTorch's symm-mem ops run on that buffer too: one workspace
serves all of them, and a ``comm.empty`` tensor skips the copy in for each.

PyTorch keeps one symmetric-memory backend per process: ``set_backend`` takes another
name only until the first symmetric allocation or rendezvous, then raises "Backend can
not be changed after use." (torch 2.11, ``SymmetricMemory.cpp``), and no allocation
takes a backend of its own. Setting NCCL for commrt's buffer and restoring the previous
backend after it is therefore impossible: commrt follows the process's backend, and
switches it to NCCL only when ``COMMRT_SYMM_BACKEND=nccl`` asks (``use_nccl_backend``).

Per rank, ``probe`` says why ``nccl_symm`` cannot run here ("" when it can); ``agree``
folds every rank's answer into one, so that one rank's failure rules it out on all.
The call itself is the process group's all-reduce on the workspace (``commrt.custom``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# NCCL 2.27 added the symmetric kernels for window-registered buffers (release notes).
MIN_NCCL = (2, 27)
_API = ("set_backend", "get_backend")


def nccl_version() -> tuple[int, ...] | None:
    """The NCCL version torch was built with and loads, or None without NCCL."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a CPU or ROCm-less build
        return None
    return tuple(v) if isinstance(v, tuple) else None


def api_present() -> bool:
    """Whether ``torch.distributed._symmetric_memory`` can select the NCCL backend."""
    try:
        import torch.distributed._symmetric_memory as symm
    except Exception:
        return False
    return all(hasattr(symm, name) for name in _API)


def current_backend(device: torch.device) -> str:
    """PyTorch's symmetric-memory backend for ``device`` ("" when unknown)."""
    if not api_present():
        return ""
    import torch.distributed._symmetric_memory as symm

    try:
        return str(symm.get_backend(device) or "")
    except Exception:
        return ""


def _version_text(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def unsupported(version: tuple[int, ...] | None, api: bool) -> str:
    """Why this build cannot give NCCL's symmetric kernels ("" when it can)."""
    if version is None:
        return "this torch has no NCCL"
    if version[:2] < MIN_NCCL:
        return (f"NCCL {_version_text(version)} (symmetric kernels need "
                f"{_version_text(MIN_NCCL)} or newer)")
    if not api:
        return "this torch cannot select the NCCL symmetric-memory backend (no set_backend)"
    return ""


def use_nccl_backend(device: torch.device) -> str:
    """Make NCCL the process's symmetric-memory backend; "" on success, else why not.

    Only for ``COMMRT_SYMM_BACKEND=nccl``: PyTorch keeps the backend for the whole process
    (it cannot be restored after commrt's allocation), so the user asks for it.
    """
    why = unsupported(nccl_version(), api_present())
    if why:
        return why
    if current_backend(device) == "NCCL":
        return ""
    import torch.distributed._symmetric_memory as symm

    try:
        symm.set_backend("NCCL")
    except Exception as exc:  # symmetric memory already in use with another backend
        return (f"COMMRT_SYMM_BACKEND=nccl could not switch PyTorch's symmetric-memory "
                f"backend from {current_backend(device) or 'its default'} "
                f"({type(exc).__name__}: {exc}); set it before any symmetric allocation")
    return ""


def probe(backend: str, registered: bool, *, version: tuple[int, ...] | None = None,
          api: bool | None = None) -> str:
    """This rank's reason ``nccl_symm`` cannot run ("" when it can).

    ``backend``: the backend the workspace was allocated with; ``registered``: that
    allocation and its rendezvous succeeded. ``version`` and ``api`` default to this
    process's (tests pass them).
    """
    why = unsupported(nccl_version() if version is None else version,
                      api_present() if api is None else api)
    if why:
        return why
    if backend != "NCCL":
        return (f"the symmetric-memory backend is {backend or 'unknown'}, not NCCL (set "
                "COMMRT_SYMM_BACKEND=nccl, or call torch.distributed._symmetric_memory."
                "set_backend('NCCL') before any symmetric allocation)")
    if not registered:
        return "registration failed"
    return ""


def agree(reasons: Sequence[str]) -> str:
    """One reason for the group from every rank's ``probe`` ("" only when all are "").

    The same reason everywhere stays as it is; otherwise the first rank that cannot run
    it is named: ``"registration failed on rank 1"``.
    """
    failing = [(r, why) for r, why in enumerate(reasons) if why]
    if not failing:
        return ""
    if len(failing) == len(reasons) and len(set(reasons)) == 1:
        return reasons[0]
    rank, why = failing[0]
    more = f" (and {len(failing) - 1} more ranks)" if len(failing) > 1 else ""
    return f"{why} on rank {rank}{more}"
