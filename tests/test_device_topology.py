"""The numasched.io/device-topology annotation: fixtures to annotation, parsing, validation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from numasched.api.device_topology import DeviceTopologyError, format_device_topology, parse_device_topology
from numasched.api.topology import DeviceLink, PcieDistance
from numasched.cache.device_topology import machine_device_topology, machine_to_device_topology

MACHINES = Path(__file__).parent / "fixtures" / "machines"
DOCS = Path(__file__).parent.parent / "docs" / "topology.md"
GPU = "nvidia.com/gpu"


def machine(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def gpu_link(links: dict[Any, DeviceLink], first: str, second: str) -> DeviceLink:
    key = ((GPU, first), (GPU, second)) if first <= second else ((GPU, second), (GPU, first))
    return links[key]


@pytest.mark.parametrize("name", sorted(path.stem for path in MACHINES.glob("*.yaml")))
def test_every_machine_round_trips(name: str) -> None:
    groups, links = machine_device_topology(machine(name))
    text = machine_to_device_topology(machine(name))
    assert parse_device_topology(text, name) == (groups, links)
    pretty = format_device_topology(groups, links, pretty=True)
    assert json.loads(pretty) == json.loads(text)
    device_count = sum(len(group.devices) for group in groups.values())
    assert len(links) == device_count * (device_count - 1) // 2


def test_dgx1_cube_mesh_links() -> None:
    _, links = machine_device_topology(machine("dgx1-v100"))
    assert gpu_link(links, "0", "3") == DeviceLink(nvlinks=2, nvswitch=False, pcie=PcieDistance.NODE)
    assert gpu_link(links, "0", "1") == DeviceLink(nvlinks=1, nvswitch=False, pcie=PcieDistance.PIX)
    assert gpu_link(links, "0", "6") == DeviceLink(nvlinks=0, nvswitch=False, pcie=PcieDistance.SYS)
    assert gpu_link(links, "4", "0") == DeviceLink(nvlinks=2, nvswitch=False, pcie=PcieDistance.SYS)


@pytest.mark.parametrize(("name", "count"), [("hgx-h100", 18), ("dgx-a100", 12)])
def test_nvswitch_fabric_is_detected(name: str, count: int) -> None:
    groups, links = machine_device_topology(machine(name))
    gpu_links = [link for (first, second), link in links.items() if first[0] == GPU and second[0] == GPU]
    assert len(gpu_links) == 28
    assert all(link.nvswitch and link.nvlinks == count for link in gpu_links)
    others = [link for (first, second), link in links.items() if first[0] != GPU or second[0] != GPU]
    assert not any(link.nvswitch or link.nvlinks for link in others)
    assert set(groups) == ({GPU, "rdma/hca"} if name == "hgx-h100" else {GPU})


def test_hgx_nics_share_a_switch_with_one_gpu() -> None:
    _, links = machine_device_topology(machine("hgx-h100"))
    assert links[((GPU, "2"), ("rdma/hca", "mlx5_2"))].pcie is PcieDistance.PIX
    assert links[((GPU, "2"), ("rdma/hca", "mlx5_3"))].pcie is PcieDistance.NODE
    assert links[((GPU, "2"), ("rdma/hca", "mlx5_6"))].pcie is PcieDistance.SYS


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2numa"])
def test_no_nvswitch_without_a_uniform_fabric(name: str) -> None:
    _, links = machine_device_topology(machine(name))
    assert not any(link.nvswitch for link in links.values())


def test_docs_show_every_machine() -> None:
    text = DOCS.read_text()
    for path in sorted(MACHINES.glob("*.yaml")):
        match = re.search(rf"### {re.escape(path.stem)}\n.*?```json\n(.*?)```", text, re.DOTALL)
        assert match, f"docs/topology.md has no example for {path.stem}"
        expected = machine_device_topology(machine(path.stem))
        assert parse_device_topology(match.group(1), path.stem) == expected


def _document(**changes: Any) -> str:
    document: dict[str, Any] = {
        "version": 1,
        "devices": {
            GPU: [
                {"id": "0", "numa": 0, "pciSwitch": "sw0", "healthy": True},
                {"id": "1", "numa": 0, "pciSwitch": "sw0"},
                {"id": "2", "numa": 1},
            ]
        },
        "links": [
            {"a": [GPU, "0"], "b": [GPU, "1"], "nvlinks": 2, "nvswitch": False, "pcie": "PIX"},
            {"a": [GPU, "1"], "b": [GPU, "2"], "nvlinks": 0, "pcie": "SYS"},
        ],
        "partitions": {GPU: [["0", "1"], ["2"]]},
    }
    document.update(changes)
    return json.dumps(document)


def test_valid_document_parses() -> None:
    groups, links = parse_device_topology(_document(), "node-a")
    assert [device.id for device in groups[GPU].devices] == ["0", "1", "2"]
    assert groups[GPU].partitions == (frozenset({"0", "1"}), frozenset({"2"}))
    assert groups[GPU].by_id["2"].pci_switch is None
    assert links[((GPU, "0"), (GPU, "1"))] == DeviceLink(2, False, PcieDistance.PIX)
    assert links[((GPU, "1"), (GPU, "2"))] == DeviceLink(0, False, PcieDistance.SYS)


def test_a_pair_repeated_with_the_same_values_is_accepted() -> None:
    link = {"a": [GPU, "1"], "b": [GPU, "0"], "nvlinks": 2, "pcie": "PIX"}
    base = json.loads(_document())
    _, links = parse_device_topology(_document(links=[*base["links"], link]), "node-a")
    assert len(links) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON"),
        (json.dumps([1]), "expected a JSON object"),
        (_document(version=2), "unsupported version 2"),
        (_document(extra=1), "unknown field(s) extra"),
        (_document(links=[{"a": [GPU, "0"], "b": [GPU, "9"], "nvlinks": 1}]), "device nvidia.com/gpu/9 does not exist"),
        (_document(links=[{"a": ["amd.com/gpu", "0"], "b": [GPU, "1"]}]), "amd.com/gpu/0 does not exist"),
        (
            _document(
                links=[
                    {"a": [GPU, "0"], "b": [GPU, "1"], "nvlinks": 2},
                    {"a": [GPU, "1"], "b": [GPU, "0"], "nvlinks": 1},
                ]
            ),
            "given twice with different values",
        ),
        (_document(links=[{"a": [GPU, "0"], "b": [GPU, "1"], "nvlinks": -1}]), "nvlinks must be 0-255"),
        (_document(links=[{"a": [GPU, "0"], "b": [GPU, "0"]}]), "to itself"),
        (_document(links=[{"a": [GPU, "0"], "b": [GPU, "1"], "pcie": "FAR"}]), "pcie must be one of"),
        (_document(links=[{"a": GPU, "b": [GPU, "1"]}]), "expected [resource, device id]"),
        (_document(partitions={GPU: [["0", "7"]]}), "device(s) 7 of nvidia.com/gpu do not exist"),
        (_document(partitions={"rdma/hca": [["0"]]}), "resource rdma/hca has no devices"),
        (_document(partitions={GPU: [[]]}), "non-empty list of device ids"),
        (_document(devices={GPU: [{"id": "0"}, {"id": "0"}]}, links=[], partitions={}), "appears twice"),
        (_document(devices={GPU: [{"id": "0", "numa": -1}]}, links=[], partitions={}), "numa must be"),
        (_document(devices={GPU: [{"id": 0}]}, links=[], partitions={}), "id must be a non-empty string"),
        (_document(devices={GPU: [{"id": "0", "healthy": "yes"}]}, links=[], partitions={}), "healthy must be"),
        (_document(devices={GPU: {"id": "0"}}, links=[], partitions={}), "must be a list"),
        (_document(devices={GPU: [{"id": "0", "numa": 1 << 40}]}, links=[], partitions={}), "numa must be"),
        (_document(devices={GPU: [{"id": str(i)} for i in range(1025)]}, links=[], partitions={}), "at most 1024"),
        (_document(links=[{"a": [GPU, "0"], "b": [GPU, "1"], "nvlinks": 1 << 70}]), "nvlinks must be 0-255"),
        ("[" * 100000 + "]" * 100000, "is not JSON"),
        ('{"version": ' + "1" * 5000 + "}", "is not JSON"),
    ],
)
def test_bad_documents_are_rejected_with_the_node_and_entry(text: str, message: str) -> None:
    with pytest.raises(DeviceTopologyError) as caught:
        parse_device_topology(text, "node-a")
    assert "node node-a" in str(caught.value)
    assert message in str(caught.value)


def test_asymmetric_matrix_is_rejected() -> None:
    broken = machine("pcie-8gpu-2numa")
    lines = broken["nvidia_smi_topo_m"].splitlines()
    lines[1] = lines[1].replace("PIX", "PXB", 1)
    broken["nvidia_smi_topo_m"] = "\n".join(lines)
    with pytest.raises(DeviceTopologyError, match="not symmetric: GPU0-GPU1 is PXB, GPU1-GPU0 is PIX"):
        machine_device_topology(broken)


def test_unknown_matrix_cell_and_missing_row_are_rejected() -> None:
    broken = machine("pcie-8gpu-2numa")
    broken["nvidia_smi_topo_m"] = broken["nvidia_smi_topo_m"].replace("SYS", "XYZ")
    with pytest.raises(DeviceTopologyError, match="is unknown"):
        machine_device_topology(broken)
    short = machine("pcie-8gpu-2numa")
    short["nvidia_smi_topo_m"] = "\n".join(short["nvidia_smi_topo_m"].splitlines()[:-1])
    with pytest.raises(DeviceTopologyError, match="lacks row"):
        machine_device_topology(short)
