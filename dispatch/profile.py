"""Device facts: what GPU this rank has and how the group's GPUs are linked.

Sources in order: NVML (``nvidia-ml-py``) on NVIDIA, ``amdsmi`` on AMD, torch as the
fallback. A missing or broken library never fails the job; the profile says which
source answered. NVML ignores ``CUDA_VISIBLE_DEVICES``, so devices are matched by UUID
(torch's UUID lacks NVML's ``GPU-`` prefix) and AMD devices by PCI bus id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import re
from collections.abc import Sequence

import torch

# Generation keys by marketing name; anything else gets sm<major><minor>-<slug>.
_NVIDIA_NAMES = (
    ("GH200", "sm90-gh200"),
    ("H200", "sm90-h200"),
    ("H100", "sm90-h100"),
    ("H800", "sm90-h800"),
    ("H20", "sm90-h20"),
    ("GB200", "sm100-gb200"),
    ("B200", "sm100-b200"),
    ("B300", "sm103-b300"),
    ("A100", "sm80-a100"),
    ("A800", "sm80-a800"),
    ("L40S", "sm89-l40s"),
)
_NVML_P2P_OK = 0  # NVML_P2P_STATUS_OK
_NVML_P2P_READ = 0  # NVML_P2P_CAPS_INDEX_READ is the tuple (0,) in the package: use the int
_NVML_P2P_NVLINK = 2  # NVML_P2P_CAPS_INDEX_NVLINK
_AMDSMI_LINK_XGMI = 2  # amdsmi_topo_get_link_type(...)["type"] for xGMI


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """One GPU, as one rank sees it."""

    vendor: str  # nvidia | amd | cpu
    name: str
    generation: str  # sm90-h200, gfx942, cpu, ...
    sm_count: int
    memory_bytes: int
    uuid: str = ""  # NVML form (GPU-...) on NVIDIA
    pci_bus_id: str = ""
    nvlink_count: int = 0
    source: str = "torch"  # nvml | amdsmi | torch


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """The group's devices as the dispatcher sees them (identical on every rank)."""

    vendor: str
    generation: str
    name: str
    sm_count: int
    memory_bytes: int
    world_size: int
    link: str  # nvlink | xgmi | pcie | none
    full_mesh: bool  # every pair of the group's GPUs has peer access on one host
    multicast: bool  # the device claims multicast support (advisory only)
    source: str
    homogeneous: bool = True

    def key(self) -> str:
        """Stable digest that every rank must agree on."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def sm_count(device: torch.device) -> int | None:
    """Streaming multiprocessors of a CUDA ``device``; None for any other device (the Triton
    interpreter's CPU tensors)."""
    props = _properties(device)
    return None if props is None else props.multi_processor_count


def shared_memory_per_sm(device: torch.device) -> int | None:
    """Bytes of shared memory a streaming multiprocessor of a CUDA ``device`` has; None for
    any other device."""
    props = _properties(device)
    return None if props is None else props.shared_memory_per_multiprocessor


def _properties(device: torch.device):
    """The properties of a CUDA ``device`` (cached: launch paths ask on every call); None
    for any other device."""
    return _cuda_properties(_cuda_index(device)) if device.type == "cuda" else None


@functools.cache
def _cuda_properties(index: int):
    return torch.cuda.get_device_properties(index)


def has_pdl(device: torch.device) -> bool:
    """Whether ``device`` has programmatic dependent launch (NVIDIA sm90 or newer; cached:
    the narrow scatter asks on every call)."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    return _has_pdl(_cuda_index(device))


@functools.cache
def _has_pdl(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def has_warp_sums(device: torch.device) -> bool:
    """Whether ``device`` runs ``fx.warp_sums`` (``match.any.sync`` and fp32 ``red.v4``:
    NVIDIA sm90 or newer, as for ``has_pdl``)."""
    return has_pdl(device)


def _cuda_index(device: torch.device) -> int:
    """The index of a CUDA ``device`` (``cuda`` alone: the current one), the caches' key."""
    return torch.cuda.current_device() if device.index is None else device.index


def generation_key(vendor: str, name: str, major: int = 0, minor: int = 0, gfx: str = "") -> str:
    if vendor == "amd":
        return gfx or "gfx-unknown"
    if vendor == "nvidia":
        upper = name.upper()
        for needle, key in _NVIDIA_NAMES:
            if re.search(rf"\b{needle}\b", upper):
                return key
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
        return f"sm{major}{minor}-{slug or 'unknown'}"
    return "cpu"


def _load_nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _load_amdsmi():
    # amdsmi without ROCm prints to stdout and raises KeyError on import: keep it quiet.
    try:
        import torch.cuda  # noqa: F401  (must come before amdsmi)

        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi

            amdsmi.amdsmi_init()
        return amdsmi
    except Exception:
        return None


def _torch_uuid(index: int) -> str:
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    return uuid if uuid.startswith("GPU-") or not uuid else "GPU-" + uuid


def nvml_facts(nvml, uuid: str, name_hint: str = "") -> DeviceFacts | None:
    """Facts for the GPU with this NVML UUID, or None when NVML cannot answer."""
    try:
        h = nvml.nvmlDeviceGetHandleByUUID(uuid)
        name = nvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
        mem = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
        pci = nvml.nvmlDeviceGetPciInfo(h).busId
        pci = pci.decode() if isinstance(pci, bytes) else pci
        links = _nvml_link_count(nvml, h)
    except Exception:
        return None
    return DeviceFacts("nvidia", name or name_hint, generation_key("nvidia", name, major, minor),
                       0, mem, uuid, str(pci).lower(), links, "nvml")


def _nvml_link_count(nvml, handle) -> int:
    # Read the count from the field value; looping over links raises past the last one.
    try:
        field = nvml.NVML_FI_DEV_NVLINK_LINK_COUNT
        (value,) = nvml.nvmlDeviceGetFieldValues(handle, [field])
        if getattr(value, "nvmlReturn", 0) != 0:
            return 0
        return int(value.value.uiVal)
    except Exception:
        return 0


def nvml_pair_link(nvml, uuid_a: str, uuid_b: str) -> str:
    """'nvlink', 'pcie' (peer access over PCIe) or 'none' for two GPUs of one host."""
    try:
        a = nvml.nvmlDeviceGetHandleByUUID(uuid_a)
        b = nvml.nvmlDeviceGetHandleByUUID(uuid_b)
        if nvml.nvmlDeviceGetP2PStatus(a, b, _NVML_P2P_NVLINK) == _NVML_P2P_OK:
            return "nvlink"
        if nvml.nvmlDeviceGetP2PStatus(a, b, _NVML_P2P_READ) == _NVML_P2P_OK:
            return "pcie"
    except Exception:
        return "unknown"
    return "none"


def amdsmi_facts(amdsmi, pci_bus_id: str) -> DeviceFacts | None:
    try:
        for h in amdsmi.amdsmi_get_processor_handles():
            if amdsmi.amdsmi_get_gpu_device_bdf(h).lower() != pci_bus_id.lower():
                continue
            asic = amdsmi.amdsmi_get_gpu_asic_info(h)
            name = asic.get("market_name", "AMD GPU")
            gfx = str(asic.get("target_graphics_version", ""))
            cus = int(asic.get("num_compute_units", 0) or 0)
            vram = amdsmi.amdsmi_get_gpu_vram_info(h)
            mem = int(vram.get("vram_size", 0)) * 1024**2
            return DeviceFacts("amd", name, generation_key("amd", name, gfx=gfx), cus, mem,
                               "", pci_bus_id.lower(), 0, "amdsmi")
    except Exception:
        return None
    return None


def amdsmi_pair_link(amdsmi, bus_a: str, bus_b: str) -> str:
    try:
        handles = {amdsmi.amdsmi_get_gpu_device_bdf(h).lower(): h
                   for h in amdsmi.amdsmi_get_processor_handles()}
        info = amdsmi.amdsmi_topo_get_link_type(handles[bus_a.lower()], handles[bus_b.lower()])
        if info["type"] == _AMDSMI_LINK_XGMI and info["hops"] == 1:
            return "xgmi"
        return "pcie"
    except Exception:
        return "unknown"


def local_facts(device: torch.device | int | None = None, *, nvml=None, amdsmi=None) -> DeviceFacts:
    """Facts for this rank's device; never raises for a missing library."""
    if not torch.cuda.is_available():
        return DeviceFacts("cpu", "cpu", "cpu", 0, 0)
    index = torch.cuda.current_device() if device is None else torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        amdsmi = amdsmi if amdsmi is not None else _load_amdsmi()
        bus = getattr(props, "pci_bus_id", "") or ""
        facts = amdsmi_facts(amdsmi, bus) if amdsmi and bus else None
        if facts:
            return facts
        gfx = getattr(props, "gcnArchName", "").split(":")[0]
        return DeviceFacts("amd", props.name, generation_key("amd", props.name, gfx=gfx),
                           props.multi_processor_count, props.total_memory, "", bus.lower())
    nvml = nvml if nvml is not None else _load_nvml()
    uuid = _torch_uuid(index)
    facts = nvml_facts(nvml, uuid, props.name) if nvml and uuid else None
    if facts:
        # NVML has no SM count; torch's is exact.
        return dataclasses.replace(facts, sm_count=props.multi_processor_count)
    return DeviceFacts("nvidia", props.name,
                       generation_key("nvidia", props.name, props.major, props.minor),
                       props.multi_processor_count, props.total_memory, uuid, "")


def pair_links(facts: Sequence[DeviceFacts], hosts: Sequence[str], *, nvml=None,
               amdsmi=None) -> list[list[str]]:
    """Link kind between every pair of the group's GPUs ('self' on the diagonal)."""
    n = len(facts)
    out = [["self" if i == j else "none" for j in range(n)] for i in range(n)]
    if facts and facts[0].vendor == "nvidia":
        nvml = nvml if nvml is not None else _load_nvml()
    elif facts and facts[0].vendor == "amd":
        amdsmi = amdsmi if amdsmi is not None else _load_amdsmi()
    for i in range(n):
        for j in range(n):
            if i == j or hosts[i] != hosts[j] or facts[i].vendor != facts[j].vendor:
                continue
            if facts[i].vendor == "nvidia" and nvml is not None:
                out[i][j] = nvml_pair_link(nvml, facts[i].uuid, facts[j].uuid)
            elif facts[i].vendor == "amd" and amdsmi is not None:
                out[i][j] = amdsmi_pair_link(amdsmi, facts[i].pci_bus_id, facts[j].pci_bus_id)
            else:
                out[i][j] = "unknown"
    return out


def build_profile(facts: Sequence[DeviceFacts], links: Sequence[Sequence[str]],
                  multicast: bool = False) -> DeviceProfile:
    """Fold per-rank facts and the pair matrix into one profile (rank order matters not)."""
    first = facts[0]
    pairs = [links[i][j] for i in range(len(facts)) for j in range(len(facts)) if i != j]
    homogeneous = all(f.generation == first.generation for f in facts)
    peer_kinds = {"nvlink", "xgmi", "pcie"}
    full_mesh = bool(pairs) and all(p in peer_kinds for p in pairs) and homogeneous
    if not pairs:
        link = "none"
    elif all(p == "nvlink" for p in pairs):
        link = "nvlink"
    elif all(p == "xgmi" for p in pairs):
        link = "xgmi"
    elif all(p in peer_kinds for p in pairs):
        link = "pcie"
    else:
        link = "none"
    return DeviceProfile(
        vendor=first.vendor,
        generation=first.generation if homogeneous else "mixed",
        name=first.name if homogeneous else "+".join(sorted({f.name for f in facts})),
        sm_count=min(f.sm_count for f in facts),
        memory_bytes=min(f.memory_bytes for f in facts),
        world_size=len(facts),
        link=link,
        full_mesh=full_mesh,
        multicast=multicast,
        source=first.source,
        homogeneous=homogeneous,
    )
