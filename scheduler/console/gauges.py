"""Per node and NUMA node gauges of the scheduler, read from its cache at scrape time (a
Prometheus collector): what the scheduler believes is free, which is what it decides on.

The node exporter serves what the node itself sees under openFuyao's names (numa_node_cpus_count,
numa_node_cpus_allocated, ...: exporter/metrics.py); these are numasched_ names with the same
labels (node, numa), so a dashboard can set the two side by side. The numbers are the console's
(view.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from numasched.scheduler.console.view import ClusterView

NODE_LABELS = ["node", "numa"]

# Every name this collector serves (the dashboard test checks its queries against them).
NUMA_METRIC_NAMES = (
    "numasched_numa_cpus",
    "numasched_numa_cpus_allocatable",
    "numasched_numa_cpus_free",
    "numasched_numa_cpus_pinned",
    "numasched_numa_cpus_reserved",
    "numasched_numa_cpus_held_unknown",
    "numasched_numa_memory_bytes",
    "numasched_numa_memory_pinned_bytes",
    "numasched_numa_devices",
    "numasched_numa_devices_free",
    "numasched_stranded_devices",
    "numasched_pending_pods_by_reason_kind",
    "numasched_node_topology_usable",
)


class NumaGauges(Collector):
    def __init__(self, view: Callable[[], ClusterView]) -> None:
        self._view = view

    def describe(self) -> list[GaugeMetricFamily]:
        # Described without values: registering must not take a snapshot.
        return list(_families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        view = self._view()
        families = _families()
        (
            cpus_count,
            allocatable,
            free,
            pinned,
            reserved,
            held,
            memory,
            memory_pinned,
            devices,
            devices_free,
            stranded,
            pending,
            usable,
        ) = families
        for node in view.nodes:
            usable.add_metric([node.name, node.topology], 0.0 if node.topology in ("missing", "rejected") else 1.0)
            for resource, count in node.stranded:
                stranded.add_metric([node.name, resource], count)
            for numa in node.numa:
                labels = [node.name, str(numa.id)]
                cpus_count.add_metric(labels, numa.cpu_total)
                allocatable.add_metric(labels, numa.cpu_allocatable)
                free.add_metric(labels, numa.cpu_count("free"))
                pinned.add_metric(labels, numa.cpu_count("pinned"))
                reserved.add_metric(labels, numa.cpu_count("reserved"))
                held.add_metric(labels, numa.cpu_count("held"))
                for cell in numa.memory:
                    memory.add_metric([*labels, cell.resource], cell.total)
                    memory_pinned.add_metric([*labels, cell.resource], cell.used)
                for resource in sorted({cell.resource for cell in numa.devices}):
                    cells = numa.devices_of(resource)
                    devices.add_metric([*labels, resource], len(cells))
                    devices_free.add_metric([*labels, resource], sum(1 for cell in cells if cell.state == "free"))
        kinds: dict[str, int] = {}
        for pod in view.pending:
            kind = reason_kind(pod.reason)
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind, count in sorted(kinds.items()):
            pending.add_metric([kind], count)
        yield from families


def reason_kind(reason: str) -> str:
    """A small, fixed set of label values for why a pod waits (a reason's text would make a series
    per pod): the kubelet-predicted topology rejection, insufficient resources, a gang not ready,
    a bad pod, or other."""
    text = reason.lower()
    if "waiting for podgroup" in text or "pod group" in text:
        return "gang"
    if "numa" in text or "topology" in text:
        return "topology"
    if "insufficient" in text:
        return "insufficient"
    if "not tried yet" in text:
        return "new"
    return "other"


def _families() -> tuple[GaugeMetricFamily, ...]:
    def gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, labels=labels)

    resource_labels = [*NODE_LABELS, "resource"]
    return (
        gauge("numasched_numa_cpus", "CPUs of the NUMA node.", NODE_LABELS),
        gauge(
            "numasched_numa_cpus_allocatable", "CPUs of the NUMA node less the kubelet's reserved ones.", NODE_LABELS
        ),
        gauge("numasched_numa_cpus_free", "CPUs of the NUMA node the static CPU manager could still pin.", NODE_LABELS),
        gauge("numasched_numa_cpus_pinned", "CPUs of the NUMA node pinned by pods the scheduler knows.", NODE_LABELS),
        gauge("numasched_numa_cpus_reserved", "CPUs of the NUMA node reserved by the kubelet.", NODE_LABELS),
        gauge(
            "numasched_numa_cpus_held_unknown",
            "CPUs the node's topology source reports taken by pods the scheduler cannot name.",
            NODE_LABELS,
        ),
        gauge("numasched_numa_memory_bytes", "Allocatable memory / hugepages of the NUMA node.", resource_labels),
        gauge("numasched_numa_memory_pinned_bytes", "Memory of the NUMA node held by placed pods.", resource_labels),
        gauge("numasched_numa_devices", "Devices of a resource on the NUMA node.", resource_labels),
        gauge(
            "numasched_numa_devices_free",
            "Healthy, unallocated devices of a resource on the NUMA node.",
            resource_labels,
        ),
        gauge(
            "numasched_stranded_devices",
            "Free devices no pending request could use on one NUMA node (below the smallest pending count).",
            ["node", "resource"],
        ),
        gauge(
            "numasched_pending_pods_by_reason_kind",
            "Pending pods of this scheduler by the kind of reason they wait (topology = the kubelet would reject).",
            ["reason"],
        ),
        gauge(
            "numasched_node_topology_usable",
            "1 when the node's NUMA topology is usable, 0 when missing or rejected; label topology says which.",
            ["node", "topology"],
        ),
    )
