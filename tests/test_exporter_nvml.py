"""GPU discovery through a fake NVML (monkeypatched pynvml) built from the machine fixtures."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest
from conftest import load_hack_module

from numasched.api.topology import DeviceLink, PcieDistance
from numasched.exporter.command import GpuCache
from numasched.exporter.gpus import gpu_fingerprint, read_gpus

REPO = Path(__file__).resolve().parent.parent


gen_sysfs = load_hack_module("gen_sysfs")


def test_hgx_h100_gpus_are_on_an_nvswitch_fabric(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = gen_sysfs.load_machine("hgx-h100")
    gen_sysfs.FakeNvml(machine).install(monkeypatch)
    inventory = read_gpus(pynvml)
    assert [gpu.index for gpu in inventory.gpus] == list(range(8))
    assert all(gpu.healthy for gpu in inventory.gpus)
    assert inventory.gpus[0].uuid == gen_sysfs.gpu_uuid(machine, "0")
    assert inventory.gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert inventory.gpus[0].pci_bus_id == "0000:13:00.0"
    links = inventory.links()
    assert len(links) == 28
    assert links[(0, 1)] == DeviceLink(nvlinks=18, nvswitch=True, pcie=PcieDistance.NODE)
    assert links[(3, 4)] == DeviceLink(nvlinks=18, nvswitch=True, pcie=PcieDistance.SYS)


def test_dgx1_v100_direct_nvlinks_follow_the_cube_mesh(monkeypatch: pytest.MonkeyPatch) -> None:
    gen_sysfs.FakeNvml(gen_sysfs.load_machine("dgx1-v100")).install(monkeypatch)
    links = read_gpus(pynvml).links()
    assert links[(0, 1)] == DeviceLink(nvlinks=1, nvswitch=False, pcie=PcieDistance.PIX)
    assert links[(0, 3)] == DeviceLink(nvlinks=2, nvswitch=False, pcie=PcieDistance.NODE)
    assert links[(0, 4)] == DeviceLink(nvlinks=2, nvswitch=False, pcie=PcieDistance.SYS)
    assert links[(0, 6)] == DeviceLink(nvlinks=0, nvswitch=False, pcie=PcieDistance.SYS)


def test_a_failing_gpu_is_unhealthy_and_the_others_still_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    gen_sysfs.FakeNvml(gen_sysfs.load_machine("dgx-a100"), failing=[3]).install(monkeypatch)
    inventory = read_gpus(pynvml)
    assert [gpu.healthy for gpu in inventory.gpus] == [True, True, True, False, True, True, True, True]
    assert inventory.gpus[3].problem == "GPU is lost"
    links = inventory.links()
    assert (2, 3) not in links and (3, 4) not in links
    assert links[(0, 1)] == DeviceLink(nvlinks=12, nvswitch=True, pcie=PcieDistance.PIX)


def test_nvml_missing_gives_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_init() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken_init)
    inventory = read_gpus(pynvml)
    assert inventory.gpus == () and inventory.error


def test_nvml_read_again_only_when_the_gpu_set_changes(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("pcie-8gpu-2numa")
    root = gen_sysfs.generate_sysfs(machine, tmp_path)
    fake = gen_sysfs.FakeNvml(machine)
    cache = GpuCache()
    assert len(gpu_fingerprint(root)) == 8
    first = cache.current(root, fake)
    cache.current(root, fake)
    assert fake.init_calls == 1
    (root / "bus/pci/devices" / gen_sysfs.pci_layout(machine)[("nvidia.com/gpu", "7")][-1]).unlink()
    second = cache.current(root, fake)
    assert fake.init_calls == 2
    assert first == second
