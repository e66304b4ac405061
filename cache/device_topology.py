"""Machine fixtures (tests/fixtures/machines) to the numasched.io/device-topology annotation.

machine_device_topology reads a fixture's devices and its `nvidia-smi topo -m` matrix into the same
device groups and links the annotation carries (numasched.api.device_topology), so simulated
clusters carry real-looking annotations; machine_to_device_topology formats them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from numasched.api.device_topology import DeviceLinks, DeviceTopologyError, format_device_topology, parse_partitions
from numasched.api.topology import DeviceGroup, DeviceInfo, DeviceKey, DeviceLink, PcieDistance, derived_pcie, link_key

# Fewest GPUs for which "every pair has the same NVLink count" means a switch fabric rather than
# a small direct mesh that happens to be uniform (two or three GPUs are always pairwise joined).
NVSWITCH_MIN_GPUS = 4

_MATRIX_LABEL = re.compile(r"^(GPU|NIC)(\d+)$")
_NVLINK_CELL = re.compile(r"^NV(\d+)$")


def machine_to_device_topology(machine: Mapping[str, Any]) -> str:
    """The annotation for a machine fixture mapping (its devices and nvidia_smi_topo_m matrix)."""
    groups, links = machine_device_topology(machine)
    return format_device_topology(groups, links)


def machine_device_topology(machine: Mapping[str, Any]) -> tuple[dict[str, DeviceGroup], DeviceLinks]:
    """Device groups and links of a machine fixture mapping.

    GPU rows of the matrix are the devices of the GPU resource in listed order, NIC rows those of
    the other resource (the NICs). "NV#" cells carry # NVLinks; their PCIe path, which nvidia-smi
    does not print, is derived: the same pciSwitch is PIX, the same NUMA node NODE, else SYS.
    """
    name = str(machine.get("machine", "<unnamed machine>"))
    where = f"machine {name}"
    raw_devices = machine.get("devices", {})
    if not isinstance(raw_devices, Mapping):
        raise DeviceTopologyError(f"{where}: devices must be a mapping of resource name -> list")
    devices: dict[str, tuple[DeviceInfo, ...]] = {}
    for resource, entries in raw_devices.items():
        if not isinstance(entries, list):
            raise DeviceTopologyError(f"{where}: devices[{resource}] must be a list")
        devices[str(resource)] = tuple(
            _fixture_device(entry, f"{where}: devices[{resource}][{index}]") for index, entry in enumerate(entries)
        )
    links: DeviceLinks = {}
    matrix_text = machine.get("nvidia_smi_topo_m")
    if matrix_text is not None:
        if not isinstance(matrix_text, str):
            raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m must be text")
        labels, cells = parse_topo_matrix(matrix_text, where)
        keys = _matrix_keys(labels, devices, where)
        links = _matrix_links(labels, cells, keys, devices, where)
    partitions_raw = machine.get("partitions", {})
    document_partitions = parse_partitions(partitions_raw, devices, where) if partitions_raw else {}
    groups = {
        resource: DeviceGroup(resource=resource, devices=group, partitions=document_partitions.get(resource, ()))
        for resource, group in devices.items()
    }
    return groups, links


def _fixture_device(entry: Any, where: str) -> DeviceInfo:
    if not isinstance(entry, Mapping) or "id" not in entry:
        raise DeviceTopologyError(f"{where}: expected a mapping with an id")
    numa = entry.get("numa")
    if numa is not None and (isinstance(numa, bool) or not isinstance(numa, int) or numa < 0):
        raise DeviceTopologyError(f"{where}: numa must be a NUMA id >= 0, got {numa!r}")
    return DeviceInfo(
        id=str(entry["id"]),
        numa=numa,
        pci_bus_id=_fixture_text(entry.get("pci_bus_id")),
        pci_switch=_fixture_text(entry.get("pci_switch")),
        model=_fixture_text(entry.get("model")),
        healthy=bool(entry.get("healthy", True)),
    )


def _fixture_text(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_topo_matrix(text: str, where: str) -> tuple[list[str], dict[tuple[str, str], str]]:
    """The device labels (GPU0, NIC0, ...) and the cell for every ordered pair of an
    `nvidia-smi topo -m` matrix; columns after the devices (CPU/NUMA affinity) are ignored."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m is empty")
    labels: list[str] = []
    for token in lines[0].split():
        if not _MATRIX_LABEL.match(token):
            break
        labels.append(token)
    if not labels:
        raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m has no GPU/NIC columns in its header")
    cells: dict[tuple[str, str], str] = {}
    rows: set[str] = set()
    for line in lines[1:]:
        tokens = line.split()
        if not tokens or tokens[0] not in labels:
            continue  # legend lines ("NIC0: mlx5_0", "X = Self", ...)
        row = tokens[0]
        if row in rows:
            raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m has row {row} twice")
        if len(tokens) < len(labels) + 1:
            raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m row {row} has fewer than {len(labels)} cells")
        rows.add(row)
        for column, cell in zip(labels, tokens[1 : len(labels) + 1], strict=True):
            cells[(row, column)] = cell
    missing = [label for label in labels if label not in rows]
    if missing:
        raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m lacks row(s) {', '.join(missing)}")
    return labels, cells


def _matrix_keys(
    labels: Sequence[str], devices: Mapping[str, tuple[DeviceInfo, ...]], where: str
) -> dict[str, DeviceKey]:
    gpu_resources = [resource for resource in devices if resource.endswith("/gpu") or "gpu" in resource.lower()]
    nic_resources = [resource for resource in devices if resource not in gpu_resources]
    keys: dict[str, DeviceKey] = {}
    for kind, candidates in (("GPU", gpu_resources), ("NIC", nic_resources)):
        kind_labels = [label for label in labels if label.startswith(kind)]
        if not kind_labels:
            continue
        if len(candidates) != 1:
            raise DeviceTopologyError(
                f"{where}: cannot tell which resource the {kind} rows of nvidia_smi_topo_m are "
                f"(candidates: {', '.join(candidates) or 'none'})"
            )
        group = devices[candidates[0]]
        for label in kind_labels:
            index = int(label[len(kind) :])
            if index >= len(group):
                raise DeviceTopologyError(f"{where}: {label} in nvidia_smi_topo_m has no device in {candidates[0]}")
            keys[label] = (candidates[0], group[index].id)
    return keys


def _matrix_links(
    labels: Sequence[str],
    cells: Mapping[tuple[str, str], str],
    keys: Mapping[str, DeviceKey],
    devices: Mapping[str, tuple[DeviceInfo, ...]],
    where: str,
) -> DeviceLinks:
    info = {(resource, device.id): device for resource, group in devices.items() for device in group}
    nvlink_counts: dict[tuple[str, str], int] = {}
    links: DeviceLinks = {}
    for position, first in enumerate(labels):
        for second in labels[position + 1 :]:
            forward, backward = cells[(first, second)], cells[(second, first)]
            if forward != backward:
                raise DeviceTopologyError(
                    f"{where}: nvidia_smi_topo_m is not symmetric: {first}-{second} is {forward}, "
                    f"{second}-{first} is {backward}"
                )
            nvlink = _NVLINK_CELL.match(forward)
            first_key, second_key = keys[first], keys[second]
            if nvlink:
                count = int(nvlink.group(1))
                nvlink_counts[(first, second)] = count
                pcie = derived_pcie(info[first_key], info[second_key])
                links[link_key(first_key, second_key)] = DeviceLink(nvlinks=count, pcie=pcie)
            elif forward in PcieDistance.__members__:
                links[link_key(first_key, second_key)] = DeviceLink(pcie=PcieDistance[forward])
            else:
                raise DeviceTopologyError(f"{where}: nvidia_smi_topo_m cell {first}-{second} {forward!r} is unknown")
    gpus = [label for label in labels if label.startswith("GPU")]
    if _is_nvswitch_fabric(gpus, nvlink_counts):
        for position, first in enumerate(gpus):
            for second in gpus[position + 1 :]:
                key = link_key(keys[first], keys[second])
                links[key] = DeviceLink(nvlinks=links[key].nvlinks, nvswitch=True, pcie=links[key].pcie)
    return links


def _is_nvswitch_fabric(gpus: Sequence[str], nvlink_counts: Mapping[tuple[str, str], int]) -> bool:
    if len(gpus) < NVSWITCH_MIN_GPUS:
        return False
    counts = {nvlink_counts.get((first, second), 0) for i, first in enumerate(gpus) for second in gpus[i + 1 :]}
    return len(counts) == 1 and next(iter(counts)) > 0
