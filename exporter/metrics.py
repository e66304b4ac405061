"""Prometheus metrics of the exporter, on a registry of its own (no process-global state).

numa_node_cpus_count{node,numa}        CPUs in the NUMA node
numa_node_cpus_allocatable{node,numa}  of those, CPUs the CPU manager may hand out exclusively
numa_node_cpus_allocated{node,numa}    of those, CPUs exclusively assigned to containers now
numa_node_memory_bytes{node,numa}      memory of the NUMA node (huge pages excluded)
device_numa_node{resource,device}      NUMA node of a device (-1 when unknown)
device_healthy{resource,device}        1 when the device answers its driver, else 0
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from numasched.exporter.report import NodeReport


class ExporterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ("node", "numa")
        self.cpus_count = Gauge("numa_node_cpus_count", "CPUs in the NUMA node", labels, registry=self.registry)
        self.cpus_allocatable = Gauge(
            "numa_node_cpus_allocatable",
            "CPUs of the NUMA node the CPU manager may assign exclusively",
            labels,
            registry=self.registry,
        )
        self.cpus_allocated = Gauge(
            "numa_node_cpus_allocated",
            "CPUs of the NUMA node exclusively assigned to containers",
            labels,
            registry=self.registry,
        )
        self.memory_bytes = Gauge(
            "numa_node_memory_bytes", "Memory of the NUMA node, huge pages excluded", labels, registry=self.registry
        )
        device_labels = ("resource", "device")
        self.device_numa = Gauge(
            "device_numa_node", "NUMA node of a device (-1: unknown)", device_labels, registry=self.registry
        )
        self.device_healthy = Gauge(
            "device_healthy", "1 when the device is healthy, 0 otherwise", device_labels, registry=self.registry
        )

    def update(self, report: NodeReport) -> None:
        topology = report.topology
        node = topology.node_name
        used = report.usage.used_cpus()
        for gauge in (
            self.cpus_count,
            self.cpus_allocatable,
            self.cpus_allocated,
            self.memory_bytes,
            self.device_numa,
            self.device_healthy,
        ):
            gauge.clear()
        for numa in topology.numa_ids:
            cpus = topology.cpus_by_numa.get(numa)
            if cpus is None:
                continue
            self.cpus_count.labels(node, str(numa)).set(len(cpus))
            self.cpus_allocatable.labels(node, str(numa)).set(len(cpus & topology.allocatable_cpus))
            self.cpus_allocated.labels(node, str(numa)).set(len(cpus & used))
            self.memory_bytes.labels(node, str(numa)).set(report.memory_total.get("memory", {}).get(numa, 0))
        for resource, group in topology.devices.items():
            for device in group.devices:
                self.device_numa.labels(resource, device.id).set(-1 if device.numa is None else device.numa)
                self.device_healthy.labels(resource, device.id).set(1 if device.healthy else 0)

    def sample(self, name: str, labels: dict[str, str]) -> Any:
        """One sample's value (tests and debugging)."""
        return self.registry.get_sample_value(name, labels)
