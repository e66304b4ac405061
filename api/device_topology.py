"""The numasched.io/device-topology annotation: devices, their links and allowed partitions.

The node exporter writes it (JSON) in the metadata.annotations of a node's Numatopology object with
format_device_topology; the scheduler's cache reads it with parse_device_topology into the
DeviceGroup and DeviceLink parts of NumaTopology. One module for both sides, so what is written is
what is read. A node whose annotation does not validate keeps NUMA-only device choice: the caller
reports the DeviceTopologyError message, which names the node and the offending entry.

Schema (version 1):

    {"version": 1,
     "devices": {"<resource>": [{"id": "0", "numa": 0, "pciBusId": "0000:07:00.0",
                                 "pciSwitch": "plx0", "model": "...", "healthy": true}, ...]},
     "links": [{"a": ["<resource>", "<id>"], "b": ["<resource>", "<id>"],
                "nvlinks": 2, "nvswitch": false, "pcie": "PIX"}, ...],
     "partitions": {"<resource>": [["0", "1", "2", "3"], ["4", "5", "6", "7"]]}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from numasched.api.topology import (
    MAX_DEVICES_PER_RESOURCE,
    MAX_KERNEL_NUMA_ID,
    DeviceGroup,
    DeviceInfo,
    DeviceKey,
    DeviceLink,
    PcieDistance,
    link_key,
)

DEVICE_TOPOLOGY_ANNOTATION = "numasched.io/device-topology"
DEVICE_TOPOLOGY_VERSION = 1

DeviceLinks = dict[tuple[DeviceKey, DeviceKey], DeviceLink]

# NVLinks between two devices: 18 on an H100; a larger count is a corrupt annotation.
MAX_NVLINKS = 255

_DEVICE_FIELDS = frozenset({"id", "numa", "pciBusId", "pciSwitch", "model", "healthy"})
_LINK_FIELDS = frozenset({"a", "b", "nvlinks", "nvswitch", "pcie"})
_TOP_FIELDS = frozenset({"version", "devices", "links", "partitions"})


class DeviceTopologyError(ValueError):
    """A device topology annotation (or machine fixture) that cannot be used."""


def _check_fields(entry: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    """A field this version does not define is a typo or a newer writer: refused, named."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise DeviceTopologyError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")


def parse_device_topology(text: str, node_name: str) -> tuple[dict[str, DeviceGroup], DeviceLinks]:
    """Read the annotation into device groups per resource and links per unordered pair.

    Raises DeviceTopologyError naming the node and the entry at fault.
    """
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        # ValueError: JSONDecodeError, or an integer too long to convert; RecursionError: nesting.
        message = str(error)[:120]
        raise DeviceTopologyError(f"node {node_name}: {DEVICE_TOPOLOGY_ANNOTATION} is not JSON: {message}") from None
    return device_topology_from_document(document, node_name)


def device_topology_from_document(document: Any, node_name: str) -> tuple[dict[str, DeviceGroup], DeviceLinks]:
    """Like parse_device_topology for an already decoded JSON document."""
    where = f"node {node_name}: {DEVICE_TOPOLOGY_ANNOTATION}"
    if not isinstance(document, Mapping):
        raise DeviceTopologyError(f"{where}: expected a JSON object, got {type(document).__name__}")
    _check_fields(document, _TOP_FIELDS, where)
    version = document.get("version")
    if version != DEVICE_TOPOLOGY_VERSION:
        raise DeviceTopologyError(
            f"{where}: unsupported version {version!r} (this scheduler reads version {DEVICE_TOPOLOGY_VERSION})"
        )
    devices_by_resource = _parse_devices(document.get("devices", {}), where)
    links = _parse_links(document.get("links", []), devices_by_resource, where)
    partitions = parse_partitions(document.get("partitions", {}), devices_by_resource, where)
    groups = {
        resource: DeviceGroup(resource=resource, devices=devices, partitions=partitions.get(resource, ()))
        for resource, devices in devices_by_resource.items()
    }
    return groups, links


def _parse_devices(raw: Any, where: str) -> dict[str, tuple[DeviceInfo, ...]]:
    if not isinstance(raw, Mapping):
        raise DeviceTopologyError(f"{where}: devices must be an object of resource name -> list of devices")
    result: dict[str, tuple[DeviceInfo, ...]] = {}
    for resource, entries in raw.items():
        if not isinstance(resource, str) or not resource:
            raise DeviceTopologyError(f"{where}: devices: resource names must be non-empty strings")
        if not isinstance(entries, list):
            raise DeviceTopologyError(f"{where}: devices[{resource}] must be a list")
        if len(entries) > MAX_DEVICES_PER_RESOURCE:
            raise DeviceTopologyError(
                f"{where}: devices[{resource}] lists {len(entries)} devices (at most {MAX_DEVICES_PER_RESOURCE})"
            )
        seen: set[str] = set()
        parsed: list[DeviceInfo] = []
        for index, entry in enumerate(entries):
            device = _parse_device(entry, f"{where}: devices[{resource}][{index}]")
            if device.id in seen:
                raise DeviceTopologyError(f"{where}: devices[{resource}]: device id {device.id!r} appears twice")
            seen.add(device.id)
            parsed.append(device)
        result[resource] = tuple(parsed)
    return result


def _parse_device(entry: Any, where: str) -> DeviceInfo:
    if not isinstance(entry, Mapping):
        raise DeviceTopologyError(f"{where}: expected an object")
    _check_fields(entry, _DEVICE_FIELDS, where)
    device_id = entry.get("id")
    if not isinstance(device_id, str) or not device_id:
        raise DeviceTopologyError(f"{where}: id must be a non-empty string, got {device_id!r}")
    numa = entry.get("numa")
    if numa is not None and (
        isinstance(numa, bool) or not isinstance(numa, int) or not 0 <= numa <= MAX_KERNEL_NUMA_ID
    ):
        raise DeviceTopologyError(
            f"{where} (device {device_id}): numa must be a NUMA id 0-{MAX_KERNEL_NUMA_ID} or null, got {numa!r:.40}"
        )
    healthy = entry.get("healthy", True)
    if not isinstance(healthy, bool):
        raise DeviceTopologyError(f"{where} (device {device_id}): healthy must be true or false, got {healthy!r}")
    return DeviceInfo(
        id=device_id,
        numa=numa,
        pci_bus_id=_optional_text(entry, "pciBusId", f"{where} (device {device_id})"),
        pci_switch=_optional_text(entry, "pciSwitch", f"{where} (device {device_id})"),
        model=_optional_text(entry, "model", f"{where} (device {device_id})"),
        healthy=healthy,
    )


def _optional_text(entry: Mapping[str, Any], field: str, where: str) -> str | None:
    value = entry.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DeviceTopologyError(f"{where}: {field} must be a string, got {value!r}")
    return value


def _parse_links(raw: Any, devices: Mapping[str, tuple[DeviceInfo, ...]], where: str) -> DeviceLinks:
    if not isinstance(raw, list):
        raise DeviceTopologyError(f"{where}: links must be a list")
    known = {(resource, device.id) for resource, group in devices.items() for device in group}
    links: DeviceLinks = {}
    for index, entry in enumerate(raw):
        here = f"{where}: links[{index}]"
        if not isinstance(entry, Mapping):
            raise DeviceTopologyError(f"{here}: expected an object")
        _check_fields(entry, _LINK_FIELDS, here)
        first = _parse_endpoint(entry.get("a"), f"{here}.a", known)
        second = _parse_endpoint(entry.get("b"), f"{here}.b", known)
        if first == second:
            raise DeviceTopologyError(f"{here}: links device {first[0]}/{first[1]} to itself")
        link = _parse_link_values(entry, f"{here} ({first[0]}/{first[1]} - {second[0]}/{second[1]})")
        key = link_key(first, second)
        previous = links.get(key)
        if previous is not None and previous != link:
            raise DeviceTopologyError(
                f"{here}: the pair {first[0]}/{first[1]} - {second[0]}/{second[1]} is given twice with different "
                f"values ({_describe_link(previous)} and {_describe_link(link)}): links must be symmetric"
            )
        links[key] = link
    return links


def _parse_endpoint(raw: Any, where: str, known: set[DeviceKey]) -> DeviceKey:
    if not isinstance(raw, list) or len(raw) != 2 or not all(isinstance(part, str) and part for part in raw):
        raise DeviceTopologyError(f"{where}: expected [resource, device id], got {raw!r}")
    key = (raw[0], raw[1])
    if key not in known:
        raise DeviceTopologyError(f"{where}: device {key[0]}/{key[1]} does not exist in devices")
    return key


def _parse_link_values(entry: Mapping[str, Any], where: str) -> DeviceLink:
    nvlinks = entry.get("nvlinks", 0)
    if isinstance(nvlinks, bool) or not isinstance(nvlinks, int):
        raise DeviceTopologyError(f"{where}: nvlinks must be an integer, got {nvlinks!r}")
    if not 0 <= nvlinks <= MAX_NVLINKS:
        raise DeviceTopologyError(f"{where}: nvlinks must be 0-{MAX_NVLINKS}, got {nvlinks}")
    nvswitch = entry.get("nvswitch", False)
    if not isinstance(nvswitch, bool):
        raise DeviceTopologyError(f"{where}: nvswitch must be true or false, got {nvswitch!r}")
    pcie_raw = entry.get("pcie")
    pcie: PcieDistance | None = None
    if pcie_raw is not None:
        if not isinstance(pcie_raw, str) or pcie_raw not in PcieDistance.__members__:
            names = ", ".join(PcieDistance.__members__)
            raise DeviceTopologyError(f"{where}: pcie must be one of {names} or null, got {pcie_raw!r}")
        pcie = PcieDistance[pcie_raw]
    return DeviceLink(nvlinks=nvlinks, nvswitch=nvswitch, pcie=pcie)


def _describe_link(link: DeviceLink) -> str:
    pcie = link.pcie.name if link.pcie is not None else "-"
    return f"nvlinks={link.nvlinks} nvswitch={str(link.nvswitch).lower()} pcie={pcie}"


def parse_partitions(
    raw: Any, devices: Mapping[str, tuple[DeviceInfo, ...]], where: str
) -> dict[str, tuple[frozenset[str], ...]]:
    """The "partitions" part: per resource, sets of ids of that resource's devices."""
    if not isinstance(raw, Mapping):
        raise DeviceTopologyError(f"{where}: partitions must be an object of resource name -> list of id lists")
    result: dict[str, tuple[frozenset[str], ...]] = {}
    for resource, sets in raw.items():
        if resource not in devices:
            raise DeviceTopologyError(f"{where}: partitions[{resource}]: resource {resource} has no devices")
        if not isinstance(sets, list):
            raise DeviceTopologyError(f"{where}: partitions[{resource}] must be a list of id lists")
        ids = {device.id for device in devices[resource]}
        parsed: list[frozenset[str]] = []
        for index, members in enumerate(sets):
            here = f"{where}: partitions[{resource}][{index}]"
            if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
                raise DeviceTopologyError(f"{here}: expected a non-empty list of device ids, got {members!r}")
            missing = sorted(set(members) - ids)
            if missing:
                raise DeviceTopologyError(f"{here}: device(s) {', '.join(missing)} of {resource} do not exist")
            parsed.append(frozenset(members))
        result[resource] = tuple(parsed)
    return result


def _document(
    groups: Mapping[str, DeviceGroup], links: Mapping[tuple[DeviceKey, DeviceKey], DeviceLink]
) -> dict[str, Any]:
    """The JSON document of the annotation, keys and entries in a stable order."""
    devices: dict[str, list[dict[str, Any]]] = {}
    for resource in sorted(groups):
        devices[resource] = [_device_document(device) for device in groups[resource].devices]
    link_documents = []
    for (first, second), link in sorted(links.items()):
        entry: dict[str, Any] = {
            "a": list(first),
            "b": list(second),
            "nvlinks": link.nvlinks,
            "nvswitch": link.nvswitch,
        }
        if link.pcie is not None:
            entry["pcie"] = link.pcie.name
        link_documents.append(entry)
    document: dict[str, Any] = {"version": DEVICE_TOPOLOGY_VERSION, "devices": devices, "links": link_documents}
    partitions = {
        resource: [_ordered_ids(groups[resource], members) for members in groups[resource].partitions]
        for resource in sorted(groups)
        if groups[resource].partitions
    }
    if partitions:
        document["partitions"] = partitions
    return document


def format_device_topology(
    groups: Mapping[str, DeviceGroup],
    links: Mapping[tuple[DeviceKey, DeviceKey], DeviceLink],
    *,
    pretty: bool = False,
) -> str:
    """The annotation text in a stable order: compact, or one device / link / partition per line."""
    document = _document(groups, links)
    if not pretty:
        return json.dumps(document, separators=(",", ":"))
    return _pretty(document)


def _pretty(document: Mapping[str, Any]) -> str:
    def compact(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "))

    def entries(items: Sequence[Any], indent: str) -> str:
        if not items:
            return "[]"
        inner = ",\n".join(f"{indent}  {compact(item)}" for item in items)
        return f"[\n{inner}\n{indent}]"

    def per_resource(mapping: Mapping[str, Sequence[Any]]) -> str:
        if not mapping:
            return "{}"
        inner = ",\n".join(
            f"    {json.dumps(resource)}: {entries(items, '    ')}" for resource, items in mapping.items()
        )
        return f"{{\n{inner}\n  }}"

    lines = [f'  "version": {document["version"]}', f'  "devices": {per_resource(document["devices"])}']
    lines.append(f'  "links": {entries(document["links"], "  ")}')
    if "partitions" in document:
        lines.append(f'  "partitions": {per_resource(document["partitions"])}')
    body = ",\n".join(lines)
    return f"{{\n{body}\n}}"


def _device_document(device: DeviceInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": device.id, "numa": device.numa}
    if device.pci_bus_id is not None:
        entry["pciBusId"] = device.pci_bus_id
    if device.pci_switch is not None:
        entry["pciSwitch"] = device.pci_switch
    if device.model is not None:
        entry["model"] = device.model
    entry["healthy"] = device.healthy
    return entry


def _ordered_ids(group: DeviceGroup, members: frozenset[str]) -> list[str]:
    order = {device.id: index for index, device in enumerate(group.devices)}
    return sorted(members, key=lambda device_id: (order.get(device_id, len(order)), device_id))
