"""Prometheus metrics of the scheduler, in a registry of its own (no process-wide state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from numasched.api.allocation import PodAllocation

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
E2E_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.schedule_attempts = Counter(
            "numasched_schedule_attempts_total",
            "Pods the scheduler tried to place, by result (scheduled, unschedulable, error).",
            ["result"],
            registry=self.registry,
        )
        self.cycle_duration = Histogram(
            "numasched_scheduling_cycle_duration_seconds",
            "Time of one scheduling cycle: snapshot, session, binds.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "numasched_scheduling_attempt_duration_seconds",
            "Time from the start of a cycle to a pod's bind answer, by result.",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.e2e_duration = Histogram(
            "numasched_e2e_scheduling_duration_seconds",
            "Time from a pod's creation to its successful binding.",
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.pending_pods = Gauge(
            "numasched_pending_pods", "Pods of this scheduler waiting for a node.", registry=self.registry
        )
        self.bind_errors = Counter(
            "numasched_bind_errors_total",
            "Bindings that did not succeed, by outcome (Conflict, Gone, Failed).",
            ["status"],
            registry=self.registry,
        )
        self.numa_aligned = Counter(
            "numasched_numa_aligned_placements_total",
            "Pods bound with a NUMA placement, by how many NUMA nodes it spans.",
            ["numa_nodes"],
            registry=self.registry,
        )
        self.config_rejected = Counter(
            "numasched_config_rejected_total",
            "Configuration updates refused (the last good one stayed in force).",
            registry=self.registry,
        )
        self.plugin_errors = Counter(
            "numasched_plugin_errors_total",
            "Exceptions raised by plugins (or hint providers they call), by plugin and extension point; "
            "each fails only the pod it was about.",
            ["plugin", "extension_point"],
            registry=self.registry,
        )
        self.backoff_pods = Gauge(
            "numasched_backoff_pods",
            "Pods held back after their plugins raised, until their backoff ends.",
            registry=self.registry,
        )
        self.leader = Gauge("numasched_leader", "1 while this instance holds the leader lease.", registry=self.registry)
        self._numa_gauges: Collector | None = None

    def watch_numa(self, collector: Collector) -> None:
        """Serve the per-NUMA gauges of collector (scheduler/console/gauges.py), read at each
        scrape; a later one replaces it (a registry refuses two collectors of the same names)."""
        if self._numa_gauges is not None:
            self.registry.unregister(self._numa_gauges)
        self.registry.register(collector)
        self._numa_gauges = collector

    def observe_placement(self, allocation: PodAllocation | None) -> None:
        """Count a bound pod's NUMA placement by how many NUMA nodes it spans."""
        if allocation is None:
            return
        spanned = allocation.numa().count()
        if spanned:
            self.numa_aligned.labels(numa_nodes=str(spanned)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
