"""End to end on generated sysfs + fake NVML: golden Numatopology objects and a lossless round trip."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from conftest import load_hack_module

from numasched.api.idset import IdSet
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, apply_numa_detail, parse_numa_detail
from numasched.cache.convert_topology import numatopology_to_topology, pod_allocation_report
from numasched.cache.device_topology import machine_device_topology
from numasched.exporter.command import build_parser, discover_once
from numasched.exporter.numatopology import numatopology_object
from numasched.exporter.report import report_summary
from numasched.exporter.usage import NodeUsage

REPO = Path(__file__).resolve().parent.parent
GOLDEN_MACHINES = ["dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4"]


gen_sysfs = load_hack_module("gen_sysfs")


@pytest.mark.parametrize("machine_name", GOLDEN_MACHINES)
def test_golden_topology_and_numatopology(machine_name: str, tmp_path: Path) -> None:
    expected = yaml.safe_load((REPO / f"tests/fixtures/exporter/{machine_name}.yaml").read_text())
    actual = gen_sysfs.golden_document(machine_name, tmp_path)
    # Through YAML so tuples and dicts compare as the file stores them.
    assert yaml.safe_load(yaml.safe_dump(actual)) == expected


def discover(machine: dict[str, Any], tmp_path: Path, *flags: str) -> tuple[Any, dict[str, Any]]:
    root = gen_sysfs.generate_sysfs(machine, tmp_path / "sys")
    args = build_parser().parse_args(
        [
            "--node-name",
            str(machine["machine"]),
            "--sysfs",
            str(root),
            "--kubelet-config",
            str(tmp_path / "none.yaml"),
            "--pod-resources-socket",
            str(tmp_path / "none.sock"),
            "--cpu-manager-state",
            str(tmp_path / "none"),
            "--device-id-format",
            "nvidia.com/gpu=index",
            *flags,
        ]
    )
    report, objects = asyncio.run(discover_once(args, nvml=gen_sysfs.FakeNvml(machine)))
    return report, objects.numatopology


def switch_groups(devices: Any) -> set[frozenset[str]]:
    groups: dict[Any, set[str]] = {}
    for device in devices:
        groups.setdefault(device.pci_switch, set()).add(device.id)
    return {frozenset(ids) for ids in groups.values()}


def read_back(obj: dict[str, Any]) -> Any:
    """The scheduler's reading of a Numatopology, with the numa-detail annotation applied.

    apply_numa_detail is idempotent, so this stays the scheduler's reading once
    numatopology_to_topology applies the annotation itself.
    """
    return apply_numa_detail(
        numatopology_to_topology(obj), parse_numa_detail(obj["metadata"]["annotations"][NUMA_DETAIL_ANNOTATION])
    )


@pytest.mark.parametrize("machine_name", [*GOLDEN_MACHINES, "pcie-8gpu-2numa"])
def test_round_trip_through_numatopology_is_lossless(machine_name: str, tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine(machine_name)
    _, obj = discover(machine, tmp_path)
    topology = read_back(obj)
    assert list(topology.numa_ids) == [node["id"] for node in machine["numa_nodes"]]
    assert {info.cpu: (info.core, info.socket, info.numa, info.l3) for info in topology.cpus} == {
        cpu: (core["core"], core["socket"], core["numa"], core["l3"])
        for core in machine["cores"]
        for cpu in IdSet.parse(core["cpus"])
    }
    assert [[topology.distance(a, b) for b in topology.numa_ids] for a in topology.numa_ids] == machine[
        "numa_distances"
    ]
    assert topology.memory == {
        "memory": {node["id"]: gen_sysfs.quantity_bytes(node["memory"]) for node in machine["numa_nodes"]}
    }
    expected_groups, expected_links = machine_device_topology(machine)
    assert set(topology.devices) == set(expected_groups)
    for resource, group in expected_groups.items():
        published = topology.devices[resource]
        assert [(d.id, d.numa, d.model, d.healthy) for d in published.devices] == [
            (d.id, d.numa, d.model, d.healthy) for d in group.devices
        ]
        assert switch_groups(published.devices) == switch_groups(group.devices)
    assert topology.links == expected_links
    assert topology.reserved_cpus == IdSet()


def test_failing_gpu_is_published_unhealthy_when_it_can_be_named(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("hgx-h100")
    nvml = gen_sysfs.FakeNvml(machine, failing=[2])
    root = gen_sysfs.generate_sysfs(machine, tmp_path / "sys")
    base = ["--node-name", "n", "--sysfs", str(root), "--pod-resources-socket", str(tmp_path / "x.sock")]
    base += ["--cpu-manager-state", str(tmp_path / "x"), "--kubelet-config", str(tmp_path / "x.yaml")]
    # By index the lost GPU still has a name: published, unhealthy, not allocatable.
    report, objects = asyncio.run(
        discover_once(build_parser().parse_args([*base, "--device-id-format", "nvidia.com/gpu=index"]), nvml=nvml)
    )
    # Without PodResources the exporter cannot see which GPUs are held, so it says nothing of them.
    assert "nvidia.com/gpu" not in objects.numatopology["spec"]["numares"]
    # The kubelet's PodResources answering, with no pod holding anything: every healthy GPU is free.
    obj = numatopology_object(attrs.evolve(report, usage=NodeUsage(source="podresources")))
    assert obj["spec"]["numares"]["nvidia.com/gpu"] == {"capacity": 8, "allocatable": "0,1,3,4,5,6,7"}
    assert report_summary(report)["problems"] == ["GPU 2: unhealthy: GPU is lost"]
    topology = numatopology_to_topology(obj)
    assert not topology.devices["nvidia.com/gpu"].by_id["2"].healthy
    assert topology.devices["nvidia.com/gpu"].by_id["3"].healthy
    assert topology.available_devices["nvidia.com/gpu"] == {"0", "1", "3", "4", "5", "6", "7"}
    assert pod_allocation_report(obj).allocations == {}
    # By UUID (the device plugin's default) a GPU that cannot tell its UUID cannot be published.
    report, objects = asyncio.run(discover_once(build_parser().parse_args(base), nvml=nvml))
    uuids = [gen_sysfs.gpu_uuid(machine, str(i)) for i in range(8)]
    spec = numatopology_object(attrs.evolve(report, usage=NodeUsage(source="podresources")))["spec"]
    assert spec["numares"]["nvidia.com/gpu"] == {
        "capacity": 7,
        "allocatable": ",".join(uuid for i, uuid in enumerate(uuids) if i != 2),
    }
    assert report.problems == ("GPU 2: unhealthy and its uuid is unknown; not published",)


def test_docs_example_matches_golden() -> None:
    text = (REPO / "docs/exporter.md").read_text()
    block = text.split("<!-- golden: dgx1-v100 -->", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    example = yaml.safe_load(block)
    spec = yaml.safe_load((REPO / "tests/fixtures/exporter/dgx1-v100.yaml").read_text())["numatopology"]["spec"]
    assert example == {key: spec[key] for key in example}
    assert set(example) == {"numares", "policies", "resReserved"}
