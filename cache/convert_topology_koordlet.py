"""Koordinator's annotations on the NodeResourceTopology its koordlet writes.

koordlet publishes zones whose `available` equals `allocatable` (usage is not subtracted), and puts
the node's real CPU state in annotations of the same object (koordinator apis/extension
numa_aware.go):

  node.koordinator.sh/cpu-topology       {"detail": [{"id", "core", "socket", "node"}, ...]}
  kubelet.koordinator.sh/cpu-manager-policy  {"policy", "options": {...}, "reservedCPUs": "<cpuset>"}
  node.koordinator.sh/cpu-shared-pools   [{"socket", "node", "cpuset"}, ...]: CPUs no pod holds
                                         exclusively (the kubelet's reserved CPUs included)
  node.koordinator.sh/pod-cpu-allocs     [{"namespace", "name", "uid", "cpuset", "managedByKubelet"}]

parse_koordlet_cpu_state reads them as one unit; KoordletAnnotationError says which entry is
wrong (the caller then ignores all of them and reads the zones alone).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import MAX_NUMA_ID
from numasched.api.topology import MAX_CPU_ID, CpuInfo

CPU_TOPOLOGY_ANNOTATION = "node.koordinator.sh/cpu-topology"
CPU_MANAGER_POLICY_ANNOTATION = "kubelet.koordinator.sh/cpu-manager-policy"
CPU_SHARED_POOLS_ANNOTATION = "node.koordinator.sh/cpu-shared-pools"
POD_CPU_ALLOCS_ANNOTATION = "node.koordinator.sh/pod-cpu-allocs"
# Go int32 fields: the largest core or socket id they can carry.
_MAX_INT32 = (1 << 31) - 1


class KoordletAnnotationError(ValueError):
    """A koordlet annotation that cannot be read; the message names it and the entry."""


@attrs.frozen(slots=True)
class KoordletPodCpus:
    namespace: str
    name: str
    uid: str
    cpus: IdSet


@attrs.frozen(slots=True)
class KoordletCpuState:
    """The node's CPUs with their real ids, as koordlet reports them."""

    cpus: tuple[CpuInfo, ...]
    # The kubelet's CPU manager: policy ("" when koordlet could not read it), options, reserved CPUs.
    cpu_manager_policy: str = ""
    cpu_manager_options: dict[str, str] = attrs.field(factory=dict)
    reserved_cpus: IdSet = attrs.field(factory=IdSet)
    # CPUs no pod holds exclusively; None when koordlet does not publish the pools.
    shared_cpus: IdSet | None = None
    pods: tuple[KoordletPodCpus, ...] = ()


def _decode(annotations: Mapping[str, Any], key: str) -> Any:
    text = annotations.get(key)
    if not isinstance(text, str):
        raise KoordletAnnotationError(f"{key}: expected a JSON string")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise KoordletAnnotationError(f"{key}: not JSON: {str(error)[:120]}") from None


def _int32(entry: Mapping[str, Any], field: str, where: str, limit: int = _MAX_INT32) -> int:
    value = entry.get(field, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise KoordletAnnotationError(f"{where}.{field}: expected an integer 0-{limit}, got {value!r:.40}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise KoordletAnnotationError(f"{where}: expected an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:  # Go marshals an empty slice field as null
        return []
    if not isinstance(value, list):
        raise KoordletAnnotationError(f"{where}: expected a list")
    return value


def _text(entry: Mapping[str, Any], field: str, where: str) -> str:
    value = entry.get(field, "")
    if not isinstance(value, str):
        raise KoordletAnnotationError(f"{where}.{field}: expected a string")
    return value


def _cpuset(text: str, known: IdSet, where: str) -> IdSet:
    try:
        cpus = IdSet.parse(text, max_id=MAX_CPU_ID)
    except IdSetError as error:
        raise KoordletAnnotationError(f"{where}: {error}") from None
    unknown = cpus - known
    if unknown:
        raise KoordletAnnotationError(f"{where}: CPUs {unknown.format()} are not in {CPU_TOPOLOGY_ANNOTATION}")
    return cpus


def _cpu_topology(annotations: Mapping[str, Any], numa_ids: set[int]) -> tuple[CpuInfo, ...]:
    document = _object(_decode(annotations, CPU_TOPOLOGY_ANNOTATION), CPU_TOPOLOGY_ANNOTATION)
    detail = _list(document.get("detail"), f"{CPU_TOPOLOGY_ANNOTATION}.detail")
    if not detail or len(detail) > MAX_CPU_ID + 1:
        raise KoordletAnnotationError(f"{CPU_TOPOLOGY_ANNOTATION}.detail: expected 1-{MAX_CPU_ID + 1} CPUs")
    cpus: dict[int, CpuInfo] = {}
    for index, raw in enumerate(detail):
        where = f"{CPU_TOPOLOGY_ANNOTATION}.detail[{index}]"
        entry = _object(raw, where)
        cpu = _int32(entry, "id", where, MAX_CPU_ID)
        numa = _int32(entry, "node", where, MAX_NUMA_ID)
        if numa not in numa_ids:
            raise KoordletAnnotationError(f"{where}.node: NUMA node {numa} is not a zone of this topology")
        if cpu in cpus:
            raise KoordletAnnotationError(f"{where}.id: CPU {cpu} is listed twice")
        socket = _int32(entry, "socket", where)
        # koordlet reports no cache groups: the socket stands in for the L3 group.
        cpus[cpu] = CpuInfo(cpu=cpu, core=_int32(entry, "core", where), socket=socket, numa=numa, l3=socket)
    return tuple(cpus[cpu] for cpu in sorted(cpus))


def _pods(annotations: Mapping[str, Any], known: IdSet) -> tuple[KoordletPodCpus, ...]:
    pods = []
    for index, raw in enumerate(_list(_decode(annotations, POD_CPU_ALLOCS_ANNOTATION), POD_CPU_ALLOCS_ANNOTATION)):
        where = f"{POD_CPU_ALLOCS_ANNOTATION}[{index}]"
        entry = _object(raw, where)
        pods.append(
            KoordletPodCpus(
                namespace=_text(entry, "namespace", where),
                name=_text(entry, "name", where),
                uid=_text(entry, "uid", where),
                cpus=_cpuset(_text(entry, "cpuset", where), known, f"{where}.cpuset"),
            )
        )
    return tuple(pods)


def parse_koordlet_cpu_state(annotations: Mapping[str, Any], numa_ids: set[int]) -> KoordletCpuState | None:
    """The CPU state koordlet's annotations give, or None when the object has no CPU topology
    annotation (not a koordlet object). numa_ids: the NUMA zones of the object."""
    if CPU_TOPOLOGY_ANNOTATION not in annotations:
        return None
    cpus = _cpu_topology(annotations, numa_ids)
    known = IdSet(info.cpu for info in cpus)
    policy = ""
    options: dict[str, str] = {}
    reserved = IdSet()
    if CPU_MANAGER_POLICY_ANNOTATION in annotations:
        document = _object(_decode(annotations, CPU_MANAGER_POLICY_ANNOTATION), CPU_MANAGER_POLICY_ANNOTATION)
        policy = _text(document, "policy", CPU_MANAGER_POLICY_ANNOTATION)
        if policy not in ("", "none", "static"):
            raise KoordletAnnotationError(f"{CPU_MANAGER_POLICY_ANNOTATION}.policy: unknown policy {policy!r:.40}")
        raw_options = document.get("options") or {}
        if not isinstance(raw_options, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in raw_options.items()
        ):
            raise KoordletAnnotationError(f"{CPU_MANAGER_POLICY_ANNOTATION}.options: expected a string map")
        options = dict(raw_options)
        reserved = _cpuset(
            _text(document, "reservedCPUs", CPU_MANAGER_POLICY_ANNOTATION),
            known,
            f"{CPU_MANAGER_POLICY_ANNOTATION}.reservedCPUs",
        )
    shared: IdSet | None = None
    if CPU_SHARED_POOLS_ANNOTATION in annotations:
        shared = IdSet()
        pools = _list(_decode(annotations, CPU_SHARED_POOLS_ANNOTATION), CPU_SHARED_POOLS_ANNOTATION)
        for index, raw in enumerate(pools):
            where = f"{CPU_SHARED_POOLS_ANNOTATION}[{index}]"
            shared = shared | _cpuset(_text(_object(raw, where), "cpuset", where), known, f"{where}.cpuset")
    pods = _pods(annotations, known) if POD_CPU_ALLOCS_ANNOTATION in annotations else ()
    return KoordletCpuState(
        cpus=cpus,
        cpu_manager_policy=policy,
        cpu_manager_options=options,
        reserved_cpus=reserved,
        shared_cpus=shared,
        pods=pods,
    )
