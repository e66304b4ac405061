"""The sysfs readers against trees generated from the machine fixtures, and damaged trees."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from conftest import load_hack_module

from numasched.api.idset import IdSet
from numasched.api.topology import PcieDistance
from numasched.exporter import sysfs
from numasched.exporter.rdma import read_rdma_devices

REPO = Path(__file__).resolve().parent.parent


gen_sysfs = load_hack_module("gen_sysfs")


@pytest.mark.parametrize("machine_name", ["dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4", "pcie-8gpu-2numa"])
def test_host_topology_matches_fixture(machine_name: str, tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine(machine_name)
    root = gen_sysfs.generate_sysfs(machine, tmp_path)
    host = sysfs.read_host_topology(root)
    assert list(host.numa_ids) == [node["id"] for node in machine["numa_nodes"]]
    for node, expected in zip(host.numa_nodes, machine["numa_nodes"], strict=True):
        assert node.cpus == IdSet.parse(expected["cpus"])
        assert node.memory_total == gen_sysfs.quantity_bytes(expected["memory"])
        assert node.hugepages == {}
    assert [[node.distances[other] for other in host.numa_ids] for node in host.numa_nodes] == machine["numa_distances"]
    expected_cpus = {
        cpu: (core["core"], core["socket"], core["numa"], core["l3"])
        for core in machine["cores"]
        for cpu in IdSet.parse(core["cpus"])
    }
    assert {info.cpu: (info.core, info.socket, info.numa, info.l3) for info in host.cpus} == expected_cpus


def test_hugepages_are_split_from_memory(tmp_path: Path) -> None:
    machine: dict[str, Any] = {
        "machine": "tiny",
        "numa_nodes": [
            {"id": 0, "cpus": "0-1", "memory": "8Gi", "hugepages": {"1048576": 2, "2048": 512}},
            {"id": 1, "cpus": "2-3", "memory": "8Gi"},
        ],
        "numa_distances": [[10, 20], [20, 10]],
        "cores": [
            {"socket": 0, "core": 0, "numa": 0, "l3": 0, "cpus": "0-1"},
            {"socket": 0, "core": 1, "numa": 1, "l3": 0, "cpus": "2-3"},
        ],
    }
    host = sysfs.read_host_topology(gen_sysfs.generate_sysfs(machine, tmp_path))
    assert host.numa_nodes[0].hugepages == {"hugepages-1Gi": 2 << 30, "hugepages-2Mi": 1 << 30}
    assert sysfs.memory_by_numa(host.numa_nodes) == {
        "memory": {0: 5 << 30, 1: 8 << 30},
        "hugepages-1Gi": {0: 2 << 30},
        "hugepages-2Mi": {0: 1 << 30},
    }
    assert sysfs.merge_reserved({"memory": {0: 10, 1: 10}}, {"memory": {0: 4}}) == {"memory": {0: 6, 1: 10}}


def test_l3_from_shared_cpu_list_when_cache_id_is_missing(tmp_path: Path) -> None:
    root = gen_sysfs.generate_sysfs(gen_sysfs.load_machine("epyc-1s-nps4"), tmp_path)
    for id_file in root.glob("devices/system/cpu/cpu*/cache/index3/id"):
        id_file.unlink()
    host = sysfs.read_host_topology(root)
    by_cpu = {info.cpu: info.l3 for info in host.cpus}
    assert by_cpu[0] == by_cpu[64] == by_cpu[7] == 0
    assert by_cpu[8] == 1
    assert by_cpu[127] == 7


def test_damaged_files_degrade_only_their_part(tmp_path: Path) -> None:
    root = gen_sysfs.generate_sysfs(gen_sysfs.load_machine("dgx1-v100"), tmp_path)
    (root / "devices/system/node/node1/distance").write_text("10 banana\n")
    (root / "devices/system/cpu/cpu5/topology/core_id").write_text("five\n")
    (root / "devices/system/node/node0/meminfo").unlink()
    with structlog.testing.capture_logs() as logs:
        host = sysfs.read_host_topology(root)
    assert host.numa_nodes[1].distances == {}
    assert host.numa_nodes[0].distances == {0: 10, 1: 21}
    assert host.numa_nodes[0].memory_total == 0
    assert host.numa_nodes[1].memory_total == 256 << 30
    assert 5 not in {info.cpu for info in host.cpus}
    assert len(host.cpus) == 79
    events = {entry["event"] for entry in logs}
    assert "NUMA distance row does not match the online nodes; distances dropped" in events
    assert "CPU topology unreadable; CPU left out" in events
    assert "sysfs file unreadable" in events


@pytest.fixture
def every_log_level() -> Iterator[None]:
    """structlog as it comes out of the box, every level kept, whatever an earlier test configured
    (a CLI run's configure_logging keeps warnings and above, and the fallback is logged at info)."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.mark.usefixtures("every_log_level")
def test_pci_numa_minus_one_falls_back_to_local_cpus(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("hgx-h100")
    machine["devices"]["rdma/hca"][5]["sysfs_numa_node"] = -1
    root = gen_sysfs.generate_sysfs(machine, tmp_path)
    host = sysfs.read_host_topology(root)
    with structlog.testing.capture_logs() as logs:
        nics = read_rdma_devices(root, host.numa_nodes)
    assert [nic.name for nic in nics] == [f"mlx5_{i}" for i in range(8)]
    assert [nic.pci.numa for nic in nics] == [0, 0, 0, 0, 1, 1, 1, 1]
    fallback = [entry for entry in logs if "numa_node -1" in entry["event"]]
    assert len(fallback) == 1 and fallback[0]["numa"] == 1 and fallback[0]["address"] == nics[5].pci.address
    assert nics[0].model == "ConnectX-7 400Gb/s"


def test_pcie_distances_from_sysfs_paths(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("dgx1-v100")
    root = gen_sysfs.generate_sysfs(machine, tmp_path)
    host = sysfs.read_host_topology(root)
    layout = gen_sysfs.pci_layout(machine)
    gpu = {device_id: sysfs.read_pci_device(root, path[-1], host.numa_nodes) for (_, device_id), path in layout.items()}
    assert gpu["0"] is not None and gpu["1"] is not None and gpu["2"] is not None and gpu["4"] is not None
    assert sysfs.pcie_distance(gpu["0"], gpu["1"]) == PcieDistance.PIX
    assert sysfs.pcie_distance(gpu["0"], gpu["2"]) == PcieDistance.NODE
    assert sysfs.pcie_distance(gpu["0"], gpu["4"]) == PcieDistance.SYS
    assert gpu["0"].pci_switch == gpu["1"].pci_switch != gpu["2"].pci_switch
    nested = sysfs.PciDevice(
        "0000:05:00.0",
        0,
        ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"),
    )
    sibling = sysfs.PciDevice(
        "0000:06:00.0", 0, ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:06:00.0")
    )
    assert sysfs.pcie_distance(nested, sibling) == PcieDistance.PXB
    same_root = sysfs.PciDevice("0000:00:02.0", 0, ("pci0000:00", "0000:00:02.0"))
    assert sysfs.pcie_distance(same_root, sibling) == PcieDistance.PHB
    assert sysfs.read_pci_device(root, "0000:99:00.0", host.numa_nodes) is None
    assert sysfs.read_pci_device(root, "not-an-address", host.numa_nodes) is None


def test_hugepage_names_and_address_forms() -> None:
    assert sysfs.hugepage_resource_name(2048) == "hugepages-2Mi"
    assert sysfs.hugepage_resource_name(1048576) == "hugepages-1Gi"
    assert sysfs.hugepage_resource_name(64) == "hugepages-64Ki"
    assert sysfs.normalize_pci_address("00000000:1A:00.0") == "0000:1a:00.0"
