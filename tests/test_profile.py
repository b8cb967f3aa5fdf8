"""Device profiles from mocked NVML and amdsmi: names, links, meshes, visible-device mapping."""

import types

import pytest
import torch

from commrt.dispatch import profile as prof


class FakeNvml:
    """NVML as the package exposes it, for a host of GPUs given as (uuid, name, cc, links)."""

    NVML_FI_DEV_NVLINK_LINK_COUNT = 91

    def __init__(self, gpus, p2p):
        self.gpus = {g[0]: g for g in gpus}
        self.p2p = p2p  # (uuid_a, uuid_b, caps_index) -> status

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.gpus:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][1].encode()

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self.gpus[h][2]

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=141 << 30)

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=f"00000000:{list(self.gpus).index(h):02X}:00.0")

    def nvmlDeviceGetFieldValues(self, h, fields):
        assert fields == [self.NVML_FI_DEV_NVLINK_LINK_COUNT]
        value = types.SimpleNamespace(uiVal=self.gpus[h][3])
        return [types.SimpleNamespace(nvmlReturn=0, value=value)]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert isinstance(index, int), "NVML_P2P_CAPS_INDEX_READ is a tuple in the package"
        return self.p2p.get((a, b, index), 4)


def nvlink_host(names, links=18):
    gpus = [(f"GPU-{i}", n, (9, 0) if "H" in n else (10, 0), links) for i, n in enumerate(names)]
    p2p = {(a[0], b[0], k): 0 for a in gpus for b in gpus if a != b for k in (0, 2)}
    return gpus, FakeNvml(gpus, p2p)


@pytest.mark.parametrize("name,cc,key", [
    ("NVIDIA H100 80GB HBM3", (9, 0), "sm90-h100"),
    ("NVIDIA H200", (9, 0), "sm90-h200"),
    ("NVIDIA B200", (10, 0), "sm100-b200"),
    ("NVIDIA RTX 6000 Ada Generation", (8, 9), "sm89-rtx-6000-ada-generation"),
])
def test_generation_keys_from_nvml(name, cc, key):
    nvml = FakeNvml([("GPU-a", name, cc, 18)], {})
    facts = prof.nvml_facts(nvml, "GPU-a")
    assert facts.generation == key and facts.nvlink_count == 18 and facts.source == "nvml"


def test_nvlink_pair_is_a_full_mesh():
    gpus, nvml = nvlink_host(["NVIDIA H200", "NVIDIA H200"])
    facts = [prof.nvml_facts(nvml, g[0]) for g in gpus]
    links = prof.pair_links(facts, ["h", "h"], nvml=nvml)
    p = prof.build_profile(facts, links)
    assert (p.link, p.full_mesh, p.generation, p.world_size) == ("nvlink", True, "sm90-h200", 2)


def test_pcie_only_pair_has_peer_access_but_no_nvlink():
    gpus = [("GPU-0", "NVIDIA H100 PCIe", (9, 0), 0), ("GPU-1", "NVIDIA H100 PCIe", (9, 0), 0)]
    nvml = FakeNvml(gpus, {("GPU-0", "GPU-1", 0): 0, ("GPU-1", "GPU-0", 0): 0})
    facts = [prof.nvml_facts(nvml, g[0]) for g in gpus]
    p = prof.build_profile(facts, prof.pair_links(facts, ["h", "h"], nvml=nvml))
    assert p.link == "pcie" and p.full_mesh


def test_pair_without_peer_access_or_on_two_hosts_is_not_a_mesh():
    gpus = [("GPU-0", "NVIDIA H100", (9, 0), 0), ("GPU-1", "NVIDIA H100", (9, 0), 0)]
    nvml = FakeNvml(gpus, {})
    facts = [prof.nvml_facts(nvml, g[0]) for g in gpus]
    assert not prof.build_profile(facts, prof.pair_links(facts, ["h", "h"], nvml=nvml)).full_mesh
    gpus2, nvml2 = nvlink_host(["NVIDIA H200", "NVIDIA H200"])
    facts2 = [prof.nvml_facts(nvml2, g[0]) for g in gpus2]
    p = prof.build_profile(facts2, prof.pair_links(facts2, ["a", "b"], nvml=nvml2))
    assert p.link == "none" and not p.full_mesh


def test_mixed_pair_is_its_own_generation_and_never_a_mesh():
    gpus, nvml = nvlink_host(["NVIDIA H100", "NVIDIA H200"])
    facts = [prof.nvml_facts(nvml, g[0]) for g in gpus]
    p = prof.build_profile(facts, prof.pair_links(facts, ["h", "h"], nvml=nvml))
    assert p.generation == "mixed" and not p.homogeneous and not p.full_mesh


def test_profile_key_is_stable_and_sensitive():
    gpus, nvml = nvlink_host(["NVIDIA H200", "NVIDIA H200"])
    facts = [prof.nvml_facts(nvml, g[0]) for g in gpus]
    links = prof.pair_links(facts, ["h", "h"], nvml=nvml)
    a, b = prof.build_profile(facts, links), prof.build_profile(facts, links)
    assert a.key() == b.key()
    assert a.key() != prof.build_profile(facts[:1] * 2, [["self", "pcie"], ["pcie", "self"]]).key()


def fake_cuda(monkeypatch, props):
    """One visible CUDA device with these properties, on a machine without GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "hip", None)


def test_visible_device_index_maps_to_nvml_by_uuid(monkeypatch):
    # CUDA_VISIBLE_DEVICES=3 makes physical GPU 3 torch's device 0; NVML still lists all.
    gpus = [(f"GPU-{i}", "NVIDIA H100" if i != 3 else "NVIDIA H200", (9, 0), 18)
            for i in range(4)]
    nvml = FakeNvml(gpus, {})
    fake_cuda(monkeypatch, types.SimpleNamespace(
        name="NVIDIA H200", uuid="3", major=9, minor=0, multi_processor_count=132,
        total_memory=141 << 30))
    facts = prof.local_facts(nvml=nvml)
    assert facts.uuid == "GPU-3" and facts.generation == "sm90-h200" and facts.sm_count == 132


def test_torch_fallback_when_nvml_is_missing(monkeypatch):
    fake_cuda(monkeypatch, types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", uuid="", major=9, minor=0, multi_processor_count=132,
        total_memory=80 << 30))
    monkeypatch.setattr(prof, "_load_nvml", lambda: None)
    facts = prof.local_facts()
    assert facts.source == "torch" and facts.generation == "sm90-h100"


class FakeAmdsmi:
    def __init__(self, n=2, xgmi=True):
        self.handles = [f"h{i}" for i in range(n)]
        self.xgmi = xgmi

    def amdsmi_get_processor_handles(self):
        return self.handles

    def amdsmi_get_gpu_device_bdf(self, h):
        return f"0000:{self.handles.index(h):02x}:00.0"

    def amdsmi_get_gpu_asic_info(self, h):
        return {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942",
                "num_compute_units": 304}

    def amdsmi_get_gpu_vram_info(self, h):
        return {"vram_size": 192 * 1024}

    def amdsmi_topo_get_link_type(self, a, b):
        return {"type": 2 if self.xgmi else 1, "hops": 1}


def test_mi300x_over_xgmi():
    smi = FakeAmdsmi()
    facts = [prof.amdsmi_facts(smi, f"0000:{i:02x}:00.0") for i in range(2)]
    assert facts[0].generation == "gfx942" and facts[0].sm_count == 304
    p = prof.build_profile(facts, prof.pair_links(facts, ["h", "h"], amdsmi=smi))
    assert p.link == "xgmi" and p.full_mesh and p.vendor == "amd"


def test_broken_libraries_never_fail_the_job():
    class Broken:
        def __getattr__(self, name):
            raise KeyError(name)

    assert prof.nvml_facts(Broken(), "GPU-0") is None
    assert prof.amdsmi_facts(Broken(), "0000:00:00.0") is None
    assert prof.nvml_pair_link(Broken(), "a", "b") == "unknown"
    assert prof.amdsmi_pair_link(Broken(), "a", "b") == "unknown"


def test_programmatic_dependent_launch_only_from_sm90(monkeypatch):
    from commrt.dispatch import profile as prof

    assert not prof.has_pdl(torch.device("cpu"))
    asked = []
    try:
        for cap, want in (((8, 0), False), ((9, 0), True), ((10, 0), True)):
            prof._has_pdl.cache_clear()
            monkeypatch.setattr(torch.cuda, "get_device_capability",
                                lambda d, c=cap: asked.append(d) or c)
            assert [prof.has_pdl(torch.device("cuda", 0)) for _ in range(3)] == [want] * 3
        assert asked == [0, 0, 0]  # once a device
    finally:
        prof._has_pdl.cache_clear()


def test_sm_count_and_shared_memory_are_cached_per_device_and_none_off_the_gpu(monkeypatch):
    from commrt.dispatch import profile as prof

    asked = []

    class Props:
        def __init__(self, index):
            self.multi_processor_count = 132 + index
            self.shared_memory_per_multiprocessor = 233472 + index

    def props(index):
        asked.append(index)
        return Props(index)
    prof._cuda_properties.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    try:
        assert prof.sm_count(torch.device("cpu")) is None
        assert [prof.sm_count(torch.device("cuda", 0)) for _ in range(3)] == [132] * 3
        assert prof.sm_count(torch.device("cuda")) == 133  # the current device
        assert asked == [0, 1]
        assert prof.shared_memory_per_sm(torch.device("cpu")) is None
        assert [prof.shared_memory_per_sm(torch.device("cuda", 0)) for _ in range(3)] == \
            [233472] * 3
        assert prof.shared_memory_per_sm(torch.device("cuda")) == 233473
        assert asked == [0, 1]  # one query a device for both
    finally:
        prof._cuda_properties.cache_clear()
