"""Kubernetes objects (Node + Numatopology) for a machine described in the fixture format of
tests/fixtures/machines/*.yaml: NUMA nodes, cores, devices and the `nvidia-smi topo -m` matrix.

Used by the bundled example cluster, scenario tests and the benchmark's cluster generator, so that
all of them see exactly what the exporter would publish for such a machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numasched.api.device_topology import DEVICE_TOPOLOGY_ANNOTATION
from numasched.api.idset import IdSet
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, format_numa_detail
from numasched.api.quantity import parse_integer
from numasched.api.topology import RESERVED_CPUS_POLICY, TopologyPolicy, TopologyScope
from numasched.cache.device_topology import machine_to_device_topology


def machine_cpu_detail(machine: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """cpuDetail as the exporter publishes it: zero fields left out, as Volcano's omitempty does."""
    detail: dict[str, dict[str, int]] = {}
    for core in machine.get("cores", []):
        for cpu in IdSet.parse(str(core["cpus"])):
            entry = {"numa": int(core["numa"]), "socket": int(core["socket"]), "core": int(core["core"])}
            detail[str(cpu)] = {key: value for key, value in entry.items() if value != 0}
    return detail


def machine_l3_groups(machine: Mapping[str, Any]) -> dict[int, IdSet]:
    """CPUs per last-level cache group (the socket where the machine file does not say)."""
    groups: dict[int, list[int]] = {}
    for core in machine.get("cores", []):
        groups.setdefault(int(core.get("l3", core["socket"])), []).extend(IdSet.parse(str(core["cpus"])))
    return {group: IdSet(cpus) for group, cpus in groups.items()}


def reserved_cpus_for(machine: Mapping[str, Any], count: int) -> IdSet:
    """The first `count` CPUs by whole cores of socket 0, as an operator sets reservedSystemCPUs."""
    chosen: list[int] = []
    for core in sorted(machine.get("cores", []), key=lambda c: (c["socket"], c["core"])):
        if len(chosen) >= count:
            break
        chosen.extend(IdSet.parse(str(core["cpus"])))
    return IdSet(chosen[:count])


def machine_objects(
    machine: Mapping[str, Any],
    node_name: str,
    *,
    topology_policy: TopologyPolicy = TopologyPolicy.SINGLE_NUMA_NODE,
    topology_scope: TopologyScope = TopologyScope.CONTAINER,
    cpu_manager_policy: str = "static",
    reserved_cpu_count: int = 2,
    reserved_memory: str = "4Gi",
    labels: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Node, Numatopology) for one machine."""
    all_cpus = IdSet.parse(",".join(str(n["cpus"]) for n in machine["numa_nodes"]))
    reserved = reserved_cpus_for(machine, reserved_cpu_count)
    allocatable_cpus = all_cpus - reserved
    memory_per_numa = {int(n["id"]): parse_integer(str(n["memory"])) for n in machine["numa_nodes"]}
    reserved_bytes = parse_integer(reserved_memory)
    devices: Mapping[str, list[Mapping[str, Any]]] = machine.get("devices") or {}
    capacity: dict[str, Any] = {
        "cpu": str(len(all_cpus)),
        "memory": str(sum(memory_per_numa.values())),
        "pods": "110",
    }
    allocatable: dict[str, Any] = {
        "cpu": str(len(allocatable_cpus)),
        "memory": str(sum(memory_per_numa.values()) - reserved_bytes),
        "pods": "110",
    }
    for resource, items in devices.items():
        capacity[resource] = str(len(items))
        allocatable[resource] = str(len(items))
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": {
                "kubernetes.io/hostname": node_name,
                "numasched.io/machine": str(machine.get("machine", "")),
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    numares: dict[str, Any] = {"cpu": {"allocatable": allocatable_cpus.format(), "capacity": len(all_cpus)}}
    for resource, items in devices.items():
        numares[resource] = {"allocatable": ",".join(str(d["id"]) for d in items), "capacity": len(items)}
    distances = machine.get("numa_distances") or []
    numa_ids = [int(n["id"]) for n in machine["numa_nodes"]]
    # Only what Volcano's Numatopology schema declares goes into spec (the API server prunes the
    # rest); distances, memory per NUMA node and L3 groups ride in the numa-detail annotation and
    # devices in the device-topology annotation, as the exporter writes them.
    spec: dict[str, Any] = {
        "policies": {
            "CPUManagerPolicy": cpu_manager_policy,
            "TopologyManagerPolicy": topology_policy.value,
            "TopologyManagerScope": topology_scope.value,
            RESERVED_CPUS_POLICY: reserved.format(),
        },
        "resReserved": {"cpu": str(len(reserved)), "memory": reserved_memory},
        "numares": numares,
        "cpuDetail": machine_cpu_detail(machine),
    }
    annotations = {
        NUMA_DETAIL_ANNOTATION: format_numa_detail(
            {
                row_id: {col_id: int(value) for col_id, value in zip(numa_ids, row, strict=True)}
                for row_id, row in zip(numa_ids, distances, strict=True)
            },
            {"memory": memory_per_numa},
            {"memory": memory_per_numa},
            machine_l3_groups(machine),
        )
    }
    if devices:
        annotations[DEVICE_TOPOLOGY_ANNOTATION] = machine_to_device_topology(machine)
    metadata: dict[str, Any] = {"name": node_name, "annotations": annotations}
    numatopology = {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": metadata,
        "spec": spec,
    }
    return node, numatopology
