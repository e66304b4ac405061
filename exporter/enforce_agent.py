"""The node agent's enforcement: pin the containers numasched decided, and compare each decision
with what the node did (predicted vs observed).

Enforcer keeps the node's pods current (an informer sink), writes cpuset.cpus / cpuset.mems of
the containers it is responsible for (enforce_plan.plan_pod), reads them back, and reports
mismatches once each: a counter, a Warning event on the pod, and the observed CPUs in the usage
the exporter publishes. It remembers what each cgroup held before its first write, and puts that
back only where it changed the value itself and the value is still its own.

Every cgroup failure (gone, permission, a value the kernel refuses) is logged once per container
and reason, counted per attempt, and never stops the agent.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import attrs
import structlog
from prometheus_client import CollectorRegistry, Counter

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.cache.events import EventType, ObjectEvent
from numasched.exporter.enforce_cgroup import (
    CgroupError,
    CpusetFiles,
    FailureReason,
    find_container_cgroup,
    read_cpuset,
    write_cpuset,
)
from numasched.exporter.enforce_plan import (
    Mismatch,
    Observation,
    PinTarget,
    PodView,
    compare,
    pinned_cpus,
    plan_pod,
    pod_view,
)
from numasched.exporter.usage import NodeUsage, PodUsage

log = structlog.get_logger("numasched.exporter.enforce")

MISMATCH_REASON = "NumaschedDecisionMismatch"
ANNOTATION_FAILURE = "annotation"


class EnforceMetrics:
    """numasched_decision_mismatch_total{resource}: decisions the node did not follow (each once);
    numasched_enforce_pins_total{action}: cgroup writes (pinned, restored);
    numasched_enforce_failures_total{reason}: cgroup reads/writes that failed, unreadable annotations;
    numasched_enforce_event_failures_total: mismatch events the API server did not take."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.mismatches = Counter(
            "numasched_decision_mismatch",
            "Decisions the node did not follow, once per pod, container, resource and observed value",
            ("resource",),
            registry=registry,
        )
        self.pins = Counter(
            "numasched_enforce_pins", "cgroup cpuset writes by the agent", ("action",), registry=registry
        )
        self.failures = Counter(
            "numasched_enforce_failures",
            "cgroup reads or writes that failed, by reason",
            ("reason",),
            registry=registry,
        )
        self.event_failures = Counter(
            "numasched_enforce_event_failures", "Mismatch events the API server did not take", registry=registry
        )


@attrs.frozen(slots=True)
class Written:
    """A cgroup the agent changed: what it held before the first write, and what was written."""

    pod_uid: str
    path: Path
    original: CpusetFiles
    cpus: str
    mems: str | None


# Sends one Warning event about a pod; True when the API server took it.
EventEmitter = Callable[[PodView, str, str], Awaitable[bool]]


@attrs.define
class Enforcer:
    node_name: str
    cgroup_root: Path
    metrics: EnforceMetrics
    pods: dict[str, PodView] = attrs.field(factory=dict)  # by UID, this node's pods only
    written: dict[str, Written] = attrs.field(factory=dict)  # by container id
    reported: set[tuple[str, str, str, str]] = attrs.field(factory=set)
    logged_failures: set[tuple[str, str]] = attrs.field(factory=set)
    # Set whenever the node's pods change (a container started, a pod came or went).
    changed: anyio.Event = attrs.field(factory=anyio.Event)

    # --- the informer's sink ---------------------------------------------------------------------

    def apply(self, event: ObjectEvent) -> None:
        view = pod_view(event.obj)
        if not view.uid:
            return
        if event.type is EventType.DELETED or view.node != self.node_name:
            self.pods.pop(view.uid, None)
        else:
            self.pods[view.uid] = view
        self.changed.set()

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        views = (pod_view(obj) for obj in objects)
        self.pods = {view.uid: view for view in views if view.uid and view.node == self.node_name}
        self.changed.set()

    # --- pinning ---------------------------------------------------------------------------------

    def _failed(self, what: str, container: str, error: CgroupError, **context: str) -> None:
        self.metrics.failures.labels(error.reason.value).inc()
        if (container, error.reason.value) not in self.logged_failures:
            self.logged_failures.add((container, error.reason.value))
            log.warning(
                what, node=self.node_name, container=container, reason=error.reason.value, error=str(error), **context
            )

    def _check_annotations(self) -> None:
        for pod in self.pods.values():
            if pod.problem and (pod.uid, ANNOTATION_FAILURE) not in self.logged_failures:
                self.logged_failures.add((pod.uid, ANNOTATION_FAILURE))
                self.metrics.failures.labels(ANNOTATION_FAILURE).inc()
                log.warning("decision unreadable; pod left alone", node=self.node_name, pod=pod.key, error=pod.problem)

    def targets(self, static_cpu_manager: bool, numa_of_cpu: Mapping[int, int]) -> list[PinTarget]:
        return [
            target for pod in self.pods.values() for target in plan_pod(pod, static_cpu_manager, numa_of_cpu).targets
        ]

    def enforce(self, static_cpu_manager: bool, numa_of_cpu: Mapping[int, int]) -> None:
        """Pin every target whose cgroup differs from its decision; restore what lost its target."""
        self._check_annotations()
        targets = self.targets(static_cpu_manager, numa_of_cpu)
        for target in targets:
            self._pin(target)
        self._restore(keep={str(target.container_id) for target in targets})

    def _pin(self, target: PinTarget) -> None:
        container = str(target.container_id)
        try:
            path = find_container_cgroup(self.cgroup_root, target.pod.uid, target.pod.qos, target.container_id)
            current = read_cpuset(path)
            cpus = target.cpus.format()
            mems = target.mems.format() if target.mems is not None else None
            cpus_differ = current.cpus != target.cpus
            mems_differ = target.mems is not None and current.mems != target.mems
            if not cpus_differ and not mems_differ:
                return
            # A leaf's cpuset.cpus and cpuset.mems are each checked against the parent's alone, so
            # the order of the two writes cannot make the kernel refuse either.
            write_cpuset(path, cpus if cpus_differ else None, mems if mems_differ else None)
        except CgroupError as error:
            self._failed("pinning failed", container, error, pod=target.pod.key, name=target.container)
            return
        known = self.written.get(container)
        self.written[container] = Written(
            target.pod.uid, path, known.original if known is not None else current, cpus, mems
        )
        self.metrics.pins.labels("pinned").inc()
        log.info(
            "container pinned",
            node=self.node_name,
            pod=target.pod.key,
            container=target.container,
            cpus=cpus,
            mems=mems,
            was=f"{current.cpus_text}/{current.mems_text}",
        )

    def _restore(self, keep: set[str]) -> None:
        for container in sorted(set(self.written) - keep):
            record = self.written.pop(container)
            try:
                current = read_cpuset(record.path)
            except CgroupError as error:
                if error.reason is not FailureReason.GONE:
                    self._failed("reading a pinned cgroup back failed", container, error)
                continue  # the container is gone: nothing to restore
            ours = current.cpus_text == record.cpus and (record.mems is None or current.mems_text == record.mems)
            if not ours:
                continue  # someone else wrote it since: theirs to keep
            try:
                write_cpuset(
                    record.path,
                    record.original.cpus_text,
                    record.original.mems_text if record.mems is not None else None,
                )
            except CgroupError as error:
                self._failed("restoring a cgroup failed", container, error)
                continue
            self.metrics.pins.labels("restored").inc()
            log.info("decision withdrawn; cpuset restored", node=self.node_name, container=container)

    # --- predicted vs observed -------------------------------------------------------------------

    def observe(
        self, usage: NodeUsage, node_cpus: IdSet, static_cpu_manager: bool, numa_of_cpu: Mapping[int, int]
    ) -> tuple[list[PodUsage], list[Mismatch]]:
        """What the node did for every decided container: the pods' observed holdings (to publish)
        and the mismatches not reported before (each counted here, once)."""
        known = _KnownUse(
            cpus=usage.source in ("podresources", "checkpoint"),
            devices=usage.source == "podresources" or usage.devices_known,
        )
        observed: list[PodUsage] = []
        found: list[Mismatch] = []
        for pod in self.pods.values():
            if pod.allocation is None:
                continue
            holdings, mismatches = self._observe_pod(
                pod, pod.allocation, usage, known, node_cpus, static_cpu_manager, numa_of_cpu
            )
            found += mismatches
            if holdings:
                observed.append(PodUsage(pod.namespace, pod.name, pod.uid, tuple(holdings)))
        fresh = [mismatch for mismatch in found if mismatch.key not in self.reported]
        for mismatch in fresh:
            self.reported.add(mismatch.key)
            self.metrics.mismatches.labels(mismatch.resource).inc()
            log.warning(
                "decision not followed",
                node=self.node_name,
                pod=mismatch.pod.key,
                container=mismatch.container,
                resource=mismatch.resource,
                predicted=mismatch.predicted,
                observed=mismatch.observed,
            )
        self._forget_departed()
        return observed, fresh

    def _observe_pod(
        self,
        pod: PodView,
        allocation: PodAllocation,
        usage: NodeUsage,
        known: _KnownUse,
        node_cpus: IdSet,
        static_cpu_manager: bool,
        numa_of_cpu: Mapping[int, int],
    ) -> tuple[list[ContainerAllocation], list[Mismatch]]:
        """One decided pod: the CPUs its agent-pinned containers hold, and where it differs."""
        plan = plan_pod(pod, static_cpu_manager, numa_of_cpu)
        reported = _usage_of(usage.pods, pod)
        decisions = {container.name: container for container in allocation.containers}

        def devices_of(name: str) -> Mapping[str, tuple[str, ...]] | None:
            seen = reported.get(name)
            return seen.devices if seen is not None else ({} if known.devices else None)

        holdings: list[ContainerAllocation] = []
        found: list[Mismatch] = []
        for target in plan.targets:
            read = self._read_back(target)
            observation = Observation(
                cpus=read.cpus if read is not None else None,
                mems=read.mems if read is not None else None,
                devices=devices_of(target.container),
            )
            found += compare(pod, decisions[target.container], target.mems, observation)
            if read is not None and (held := pinned_cpus(read.cpus, node_cpus)):
                holdings.append(ContainerAllocation(target.container, cpuset=held))
        # The rest of the running decided containers: the kubelet's pinned ones (CPUs per
        # PodResources) and those without a decided cpuset (devices only).
        pinned_by_agent = {target.container for target in plan.targets}
        running = {container.name for container in pod.containers if container.container_id is not None}
        for name in sorted((running - pinned_by_agent) & decisions.keys()):
            seen = reported.get(name)
            kubelet_cpus = seen.cpuset if seen is not None else IdSet()
            observation = Observation(
                cpus=kubelet_cpus if name in plan.kubelet_pinned and known.cpus else None,
                devices=devices_of(name),
            )
            found += compare(pod, decisions[name], None, observation)
        return holdings, found

    def _forget_departed(self) -> None:
        """Drop what is remembered about pods and containers that are gone (bounded memory)."""
        live = set(self.pods) | {
            str(container.container_id)
            for pod in self.pods.values()
            for container in pod.containers
            if container.container_id is not None
        }
        self.reported = {key for key in self.reported if key[0] in live}
        self.logged_failures = {key for key in self.logged_failures if key[0] in live}

    def _read_back(self, target: PinTarget) -> _ReadBack | None:
        try:
            path = find_container_cgroup(self.cgroup_root, target.pod.uid, target.pod.qos, target.container_id)
            files = read_cpuset(path)
            return _ReadBack(files.cpus, files.mems)
        except CgroupError as error:
            self._failed("reading a container's cpuset failed", str(target.container_id), error, pod=target.pod.key)
            return None


@attrs.frozen(slots=True)
class _KnownUse:
    """Which holdings the kubelet's report (PodResources or checkpoints) says anything about."""

    cpus: bool
    devices: bool


@attrs.frozen(slots=True)
class _ReadBack:
    cpus: IdSet
    mems: IdSet


def _usage_of(pods: Iterable[PodUsage], pod: PodView) -> dict[str, ContainerAllocation]:
    """The containers the kubelet reports for the pod (by UID, or by name where PodResources
    gives no UID)."""
    for usage in pods:
        if (usage.uid and usage.uid == pod.uid) or (usage.name and usage.key == pod.key):
            return {container.name: container for container in usage.containers}
    return {}


async def report_mismatches(mismatches: Iterable[Mismatch], emit: EventEmitter, metrics: EnforceMetrics) -> None:
    for mismatch in mismatches:
        if not await emit(mismatch.pod, MISMATCH_REASON, mismatch.message()):
            metrics.event_failures.inc()


class PodEvents:
    """Warning events on pods, each request bounded by the timeout; failures logged, never raised."""

    def __init__(self, api_client: Any, node_name: str, timeout: float) -> None:
        from kubernetes_asyncio import client

        self._core: Any = client.CoreV1Api(api_client)
        self._node_name = node_name
        self._timeout = timeout

    async def warn(self, pod: PodView, reason: str, message: str) -> bool:
        from numasched.cache.kube.binder import rfc3339

        now = rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{uuid.uuid4().hex[:16]}", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
            "type": "Warning",
            "reason": reason,
            "message": message[:1024],
            "action": "Enforce",
            "source": {"component": "numasched-agent", "host": self._node_name},
            "reportingComponent": "numasched-agent",
            "reportingInstance": self._node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            with anyio.fail_after(self._timeout):
                response = await self._core.create_namespaced_event(
                    pod.namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
                status = int(response.status)
                response.release()
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("mismatch event not sent", pod=pod.key, error=repr(error))
            return False
        if not 200 <= status < 300:
            log.warning("mismatch event refused", pod=pod.key, status=status)
            return False
        return True
