"""Read the kubelet's policies and reservations from its KubeletConfiguration (YAML or JSON).

A field with a bad value is logged and left at the kubelet's default; the other fields still
count. Reserved CPUs follow the kubelet: reservedSystemCPUs when set, otherwise the static CPU
manager reserves ceil(kubeReserved.cpu + systemReserved.cpu) CPUs, whole cores first from the
lowest socket (the kubelet's takeByTopology on an idle node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog
import yaml

from numasched.api.idset import IdSet, IdSetError
from numasched.api.quantity import QuantityError, parse_integer, parse_milli
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    KubeletPolicies,
    TopologyPolicy,
    TopologyScope,
)

log = structlog.get_logger("numasched.exporter.kubelet_config")


@attrs.frozen(slots=True)
class KubeletConfig:
    policies: KubeletPolicies = attrs.field(factory=KubeletPolicies)
    reserved_system_cpus: IdSet | None = None
    # kubeReserved + systemReserved, milli-CPU and bytes.
    reserved_cpu_milli: int = 0
    reserved_memory_bytes: int = 0
    # reservedMemory: resource -> NUMA node -> bytes the memory manager keeps back.
    reserved_memory_per_numa: dict[str, dict[int, int]] = attrs.field(factory=dict)
    # Whether the file was read at all; without it the policies are the kubelet defaults.
    source: str = ""

    def reserved_cpus(self, cpus: tuple[CpuInfo, ...]) -> IdSet:
        """The CPUs the static CPU manager keeps out of the exclusive pool on this machine."""
        if self.reserved_system_cpus is not None:
            return self.reserved_system_cpus
        if self.policies.cpu_manager_policy != CpuManagerPolicy.STATIC or not self.reserved_cpu_milli:
            return IdSet()
        return take_whole_cores(cpus, math.ceil(self.reserved_cpu_milli / 1000))

    def reserved_resources(self, cpus: tuple[CpuInfo, ...]) -> dict[str, str]:
        """Volcano's spec.resReserved: reserved quantities by resource name."""
        reserved: dict[str, str] = {}
        if self.reserved_system_cpus is not None:
            reserved["cpu"] = str(len(self.reserved_system_cpus))
        elif self.reserved_cpu_milli:
            milli = self.reserved_cpu_milli
            reserved["cpu"] = str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
        if self.reserved_memory_bytes:
            reserved["memory"] = format_bytes(self.reserved_memory_bytes)
        return reserved


def format_bytes(size: int) -> str:
    """Bytes as the shortest exact Kubernetes binary quantity."""
    for unit, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def take_whole_cores(cpus: tuple[CpuInfo, ...], count: int) -> IdSet:
    """`count` CPUs, whole cores first in (socket, NUMA, lowest CPU) order, then single threads."""
    cores: dict[tuple[int, int], list[int]] = {}
    info_of = {info.cpu: info for info in cpus}
    for info in cpus:
        cores.setdefault((info.socket, info.core), []).append(info.cpu)
    ordered = sorted(
        cores.values(),
        key=lambda threads: (info_of[min(threads)].socket, info_of[min(threads)].numa, min(threads)),
    )
    taken: list[int] = []
    for threads in ordered:
        if len(taken) + len(threads) <= count:
            taken.extend(sorted(threads))
    for threads in ordered:
        for cpu in sorted(threads):
            if len(taken) >= count:
                return IdSet(taken)
            if cpu not in taken:
                taken.append(cpu)
    return IdSet(taken)


def _options(raw: Any, field: str, source: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        log.warning("kubelet option map is not a map; ignored", field=field, source=source)
        return {}
    return {str(key): str(value).lower() if isinstance(value, bool) else str(value) for key, value in raw.items()}


def _enum(raw: Any, kind: type[Any], default: Any, field: str, source: str) -> Any:
    if raw is None or raw == "":
        return default
    try:
        return kind(str(raw).lower())
    except ValueError:
        log.warning("unknown kubelet policy; using the default", field=field, value=raw, source=source)
        return default


def _reserved(document: Mapping[str, Any], source: str) -> tuple[int, int]:
    cpu_milli = 0
    memory = 0
    for field in ("kubeReserved", "systemReserved"):
        section = document.get(field)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            log.warning("kubelet reservation is not a map; ignored", field=field, source=source)
            continue
        try:
            if "cpu" in section:
                cpu_milli += parse_milli(section["cpu"])
            if "memory" in section:
                memory += parse_integer(section["memory"])
        except QuantityError as error:
            log.warning("kubelet reservation unreadable; ignored", field=field, error=str(error), source=source)
    return cpu_milli, memory


def _reserved_memory(raw: Any, source: str) -> dict[str, dict[int, int]]:
    per_numa: dict[str, dict[int, int]] = {}
    if raw is None:
        return per_numa
    if not isinstance(raw, list):
        log.warning("reservedMemory is not a list; ignored", source=source)
        return per_numa
    for entry in raw:
        try:
            numa = int(entry["numaNode"])
            for name, quantity in dict(entry.get("limits") or {}).items():
                per_numa.setdefault(str(name), {})[numa] = parse_integer(quantity)
        except (KeyError, TypeError, ValueError, QuantityError) as error:
            log.warning("reservedMemory entry unreadable; ignored", entry=entry, error=str(error), source=source)
    return per_numa


def parse_kubelet_config(document: Any, source: str = "<inline>") -> KubeletConfig:
    """KubeletConfiguration fields that matter for placement; the kubelet's defaults elsewhere."""
    if not isinstance(document, Mapping):
        log.warning("kubelet configuration is not a map; using kubelet defaults", source=source)
        return KubeletConfig(source=source)
    policies = KubeletPolicies(
        cpu_manager_policy=_enum(
            document.get("cpuManagerPolicy"), CpuManagerPolicy, CpuManagerPolicy.NONE, "cpuManagerPolicy", source
        ),
        cpu_manager_options=_options(document.get("cpuManagerPolicyOptions"), "cpuManagerPolicyOptions", source),
        topology_manager_policy=_enum(
            document.get("topologyManagerPolicy"),
            TopologyPolicy,
            TopologyPolicy.NONE,
            "topologyManagerPolicy",
            source,
        ),
        topology_manager_scope=_enum(
            document.get("topologyManagerScope"),
            TopologyScope,
            TopologyScope.CONTAINER,
            "topologyManagerScope",
            source,
        ),
        topology_manager_options=_options(
            document.get("topologyManagerPolicyOptions"), "topologyManagerPolicyOptions", source
        ),
        memory_manager_policy=str(document.get("memoryManagerPolicy") or "None"),
    )
    reserved_system_cpus: IdSet | None = None
    raw_cpus = document.get("reservedSystemCPUs")
    if raw_cpus not in (None, ""):
        try:
            reserved_system_cpus = IdSet.parse(str(raw_cpus))
        except IdSetError as error:
            log.warning("reservedSystemCPUs unreadable; ignored", error=str(error), source=source)
    cpu_milli, memory = _reserved(document, source)
    return KubeletConfig(
        policies=policies,
        reserved_system_cpus=reserved_system_cpus,
        reserved_cpu_milli=cpu_milli,
        reserved_memory_bytes=memory,
        reserved_memory_per_numa=_reserved_memory(document.get("reservedMemory"), source),
        source=source,
    )


def read_kubelet_config(path: Path | None) -> KubeletConfig:
    """Parse the file at path (YAML is a superset of JSON); kubelet defaults when absent or bad."""
    if path is None:
        return KubeletConfig()
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        log.warning(
            "kubelet configuration unreadable; using kubelet defaults",
            path=str(path),
            error=getattr(error, "strerror", None) or str(error),
        )
        return KubeletConfig()
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        log.warning(
            "kubelet configuration is not YAML or JSON; using kubelet defaults", path=str(path), error=str(error)
        )
        return KubeletConfig()
    return parse_kubelet_config(document, str(path))


def format_options(options: Mapping[str, str]) -> str:
    """Policy options as Volcano-style "k=v,k=v", sorted by key."""
    return ",".join(f"{key}={value}" for key, value in sorted(options.items()))
