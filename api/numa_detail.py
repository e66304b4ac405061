"""The numasched.io/numa-detail annotation: what a node's NUMA layout says beyond Volcano's schema.

Volcano's Numatopology CRD declares policies, resReserved, numares, cpuDetail {numa, socket, core}
and podAllocations only, and the API server prunes every other spec field. The node exporter
therefore puts NUMA distances, memory and huge pages per NUMA node and the CPUs' L3 (last-level
cache) groups in this annotation of the Numatopology's metadata, where they survive pruning; the
cache reads them back into NumaTopology.

Schema (version 1), every part optional:

    {"version": 1,
     "distances": {"<numa>": {"<numa>": 10, ...}, ...},
     "memory": {"<numa>": {"memory": {"total": bytes, "allocatable": bytes},
                           "hugepages-1Gi": {...}}, ...},
     "l3": {"<l3 group>": "<cpu list>", ...}}

distances are the kernel's SLIT (10 = local); memory excludes huge pages and its allocatable
subtracts the kubelet's reservedMemory; an L3 group id is unique on the node.

The exporter writes it with format_numa_detail; the scheduler's cache reads it with
parse_numa_detail and apply_numa_detail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import MAX_NUMA_ID
from numasched.api.topology import MAX_CPU_ID, MAX_KERNEL_NUMA_ID, NumaTopology

NUMA_DETAIL_ANNOTATION = "numasched.io/numa-detail"
NUMA_DETAIL_VERSION = 1


class NumaDetailError(ValueError):
    """The annotation cannot be read; the message names the entry that is wrong."""


@attrs.frozen(slots=True)
class NumaDetail:
    distances: dict[int, dict[int, int]] = attrs.field(factory=dict)
    # Bytes per NUMA node per resource ("memory", "hugepages-1Gi").
    memory_total: dict[str, dict[int, int]] = attrs.field(factory=dict)
    memory_allocatable: dict[str, dict[int, int]] = attrs.field(factory=dict)
    # L3 group of each CPU the annotation names.
    l3_by_cpu: dict[int, int] = attrs.field(factory=dict)


def format_numa_detail(
    distances: Mapping[int, Mapping[int, int]],
    memory_total: Mapping[str, Mapping[int, int]],
    memory_allocatable: Mapping[str, Mapping[int, int]],
    l3_groups: Mapping[int, IdSet],
) -> str:
    """The annotation value: compact JSON with sorted keys, so equal content gives equal text."""
    document: dict[str, Any] = {"version": NUMA_DETAIL_VERSION}
    if distances:
        document["distances"] = {
            str(numa): {str(other): distance for other, distance in sorted(row.items())}
            for numa, row in sorted(distances.items())
        }
    memory: dict[str, dict[str, dict[str, int]]] = {}
    for resource, per_numa in sorted(memory_total.items()):
        for numa, total in sorted(per_numa.items()):
            if not total:
                continue
            allocatable = memory_allocatable.get(resource, {}).get(numa, total)
            memory.setdefault(str(numa), {})[resource] = {"total": total, "allocatable": allocatable}
    if memory:
        document["memory"] = dict(sorted(memory.items(), key=lambda item: int(item[0])))
    if l3_groups:
        document["l3"] = {str(group): cpus.format() for group, cpus in sorted(l3_groups.items())}
    return json.dumps(document, separators=(",", ":"))


def _id(text: Any, bound: int, where: str) -> int:
    # str.isdigit accepts "²"; only ASCII digits are ids.
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > 5:
        raise NumaDetailError(f"{where}: {text!r} is not an id")
    value = int(text)
    if value > bound:
        raise NumaDetailError(f"{where}: {value} exceeds {bound}")
    return value


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NumaDetailError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise NumaDetailError(f"{where}: expected an object")
    return value


def _distances(raw: Any) -> dict[int, dict[int, int]]:
    result: dict[int, dict[int, int]] = {}
    for row_key, row in _object(raw, "distances").items():
        numa = _id(row_key, MAX_KERNEL_NUMA_ID, "distances")
        result[numa] = {
            _id(column, MAX_KERNEL_NUMA_ID, f"distances[{row_key}]"): _count(value, f"distances[{row_key}][{column}]")
            for column, value in _object(row, f"distances[{row_key}]").items()
        }
    return result


def _memory(raw: Any) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
    total: dict[str, dict[int, int]] = {}
    allocatable: dict[str, dict[int, int]] = {}
    for numa_key, resources in _object(raw, "memory").items():
        numa = _id(numa_key, MAX_KERNEL_NUMA_ID, "memory")
        for resource, entry in _object(resources, f"memory[{numa_key}]").items():
            where = f"memory[{numa_key}][{resource}]"
            table = _object(entry, where)
            size = _count(table.get("total"), f"{where}.total")
            free = _count(table.get("allocatable", size), f"{where}.allocatable")
            if free > size:
                raise NumaDetailError(f"{where}: allocatable {free} exceeds total {size}")
            total.setdefault(str(resource), {})[numa] = size
            allocatable.setdefault(str(resource), {})[numa] = free
    return total, allocatable


def _l3(raw: Any) -> dict[int, int]:
    by_cpu: dict[int, int] = {}
    for group_key, cpus_text in _object(raw, "l3").items():
        group = _id(group_key, MAX_CPU_ID, "l3")
        if not isinstance(cpus_text, str):
            raise NumaDetailError(f"l3[{group_key}]: expected a CPU list")
        # Checked before parsing: a range up to a forged huge id would allocate a bit per id.
        if any(len(number) > 5 or int(number) > MAX_CPU_ID for number in re.findall(r"\d+", cpus_text)):
            raise NumaDetailError(f"l3[{group_key}]: CPU ids above {MAX_CPU_ID}")
        try:
            cpus = IdSet.parse(cpus_text)
        except IdSetError as error:
            raise NumaDetailError(f"l3[{group_key}]: {error}") from None
        for cpu in cpus:
            if cpu in by_cpu:
                raise NumaDetailError(f"l3[{group_key}]: CPU {cpu} is also in L3 group {by_cpu[cpu]}")
            by_cpu[cpu] = group
    return by_cpu


def parse_numa_detail(text: str) -> NumaDetail:
    """Read the annotation; NumaDetailError says which entry is wrong."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise NumaDetailError(f"not JSON: {error}") from None
    document = _object(document, "annotation")
    if document.get("version") != NUMA_DETAIL_VERSION:
        raise NumaDetailError(f"version {document.get('version')!r}: only version {NUMA_DETAIL_VERSION} is known")
    memory_total, memory_allocatable = _memory(document.get("memory", {}))
    return NumaDetail(
        distances=_distances(document.get("distances", {})),
        memory_total=memory_total,
        memory_allocatable=memory_allocatable,
        l3_by_cpu=_l3(document.get("l3", {})),
    )


def apply_numa_detail(topology: NumaTopology, detail: NumaDetail) -> NumaTopology:
    """The topology with the annotation's distances, memory and L3 groups; what it lacks is kept.

    A NUMA node with memory but no CPU (CXL or memory-only nodes, which cpuDetail cannot show) is
    added to the topology's NUMA nodes. Raises NumaDetailError when the annotation names a CPU the
    topology does not have, a distance between unknown NUMA nodes, or a NUMA id the scheduler's
    masks cannot hold. Applying the same detail twice gives the same topology.
    """
    memory_numa = {numa for per_numa in detail.memory_total.values() for numa in per_numa}
    too_large = {numa for numa in memory_numa if numa > MAX_NUMA_ID}
    if too_large:
        raise NumaDetailError(f"memory[{min(too_large)}]: NUMA id {min(too_large)} exceeds {MAX_NUMA_ID}")
    numa_ids = set(topology.numa_ids) | memory_numa
    for numa, row in detail.distances.items():
        unknown = ({numa} | set(row)) - numa_ids
        if unknown:
            raise NumaDetailError(f"distances[{numa}]: unknown NUMA node {min(unknown)}")
    unknown_cpus = set(detail.l3_by_cpu) - set(topology.cpu_info)
    if unknown_cpus:
        raise NumaDetailError(f"l3: CPU {min(unknown_cpus)} is not in cpuDetail")
    cpus = tuple(
        attrs.evolve(info, l3=detail.l3_by_cpu[info.cpu]) if info.cpu in detail.l3_by_cpu else info
        for info in topology.cpus
    )
    return attrs.evolve(
        topology,
        numa_ids=tuple(sorted(numa_ids)),
        cpus=cpus,
        distances={numa: dict(row) for numa, row in detail.distances.items()} or topology.distances,
        memory={resource: dict(per_numa) for resource, per_numa in detail.memory_allocatable.items()}
        or topology.memory,
    )


def l3_groups(topology: NumaTopology) -> dict[int, IdSet]:
    """The CPUs of each L3 group."""
    groups: dict[int, list[int]] = {}
    for info in topology.cpus:
        groups.setdefault(info.l3, []).append(info.cpu)
    return {group: IdSet(cpus) for group, cpus in sorted(groups.items())}
