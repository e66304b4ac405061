"""`numasched explain`: why one pod waits, node by node, down to the NUMA node, and what would let it in.

For the pod, a session is opened on a snapshot exactly as a scheduling cycle opens one; the pod's
pre-predicate runs, then every node gets the allocate action's resource check and the session's
predicates (the first failing check, its plugin and reason). For a node refused by numa-aware, or
one with a topology where the pod would hold pinned CPUs or devices, the NUMA-level picture is
computed from the node's topology and ledger (per NUMA node: free against requested CPUs, memory,
devices) with the node's kubelet policy.

What-if is the preemption's dry run (scheduler/actions/preempt.py, VictimSearch): the smallest set
of pods on the node whose departure lets the pod pass the same checks on a copy of the node. Any
pod may depart here (explain asks "what would let it in", not "what may be evicted"), so no queue,
priority or preemptable vote narrows the candidates.

Nothing here changes the cluster or the cache: the snapshot is the session's own copy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import attrs

from numasched.api.hint import TopologyHint
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, exclusive_cpus
from numasched.api.resource import is_memory_resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import CpuManagerPolicy, NumaTopology, TopologyScope
from numasched.cache.cache import Cache
from numasched.conf.model import SchedulerConfig
from numasched.plugins.numaaware.admission import container_request, containers_in_order, pod_request
from numasched.plugins.numaaware.pod_policy import PodPolicyError, read_pod_spec
from numasched.plugins.numaaware.providers.base import HintProvider, free_resources
from numasched.scheduler.actions.preempt import VictimSearch, could_fit, units_for, victim_order
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import Status, fit_error_summary

# The plugin whose refusals get a NUMA picture, and the annotation a pod asks for a policy with.
NUMA_AWARE = "numa-aware"
POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"
# The name a resource-check refusal carries (the allocate action checks resources itself).
RESOURCE_CHECK = "allocate"
# Statuses that hold a node, so their departure frees room (others are pending or gone).
_HOLDING = frozenset(
    {TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.ALLOCATED, TaskStatus.PIPELINED}
)


@attrs.frozen(slots=True)
class ResourceOnNuma:
    """One resource on one NUMA node: what is free there against what the pod requests in all.

    Units: CPUs, bytes, devices. free_ids lists the free device ids (devices only)."""

    resource: str
    free: float
    requested: float
    free_ids: tuple[str, ...] = ()

    @property
    def short(self) -> bool:
        return self.free < self.requested


@attrs.frozen(slots=True)
class NumaNodeView:
    numa: int
    resources: tuple[ResourceOnNuma, ...]

    @property
    def holds_all(self) -> bool:
        """Every requested resource fits on this NUMA node alone."""
        return not any(resource.short for resource in self.resources)


@attrs.frozen(slots=True)
class NodePolicy:
    """What the node's kubelet does with the pod (the pod's annotation can only make it stricter)."""

    topology_manager: str
    scope: str
    cpu_manager: str
    memory_manager: str
    pod_asks: str = ""


@attrs.frozen(slots=True)
class NodeVerdict:
    node: str
    fits: bool
    plugin: str = ""
    reason: str = ""
    policy: NodePolicy | None = None
    numa: tuple[NumaNodeView, ...] | None = None
    # Pod keys whose departure lets the pod in; () when it fits already, None when no set does.
    what_if: tuple[str, ...] | None = None
    what_if_note: str = ""
    # Every failing check, as the scheduler records them for its summary.
    statuses: tuple[Status, ...] = ()
    # Per resource: how many ids pods hold whose ids no source reports, and those pods. Any of
    # the free ids in the picture may be theirs.
    unknown_held: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    hints: tuple[ProviderHint, ...] = ()


@attrs.frozen(slots=True)
class Explanation:
    pod: str
    placed_on: str
    pre_predicate: Status
    summary: str
    nodes: tuple[NodeVerdict, ...]


class PodNotFound(LookupError):
    """The pod named is not one of ours in the cluster."""


def find_task(ssn: Session, key: str) -> TaskInfo | None:
    for job in ssn.jobs.values():
        for task in job.tasks.values():
            if task.key == key:
                return task
    return None


def _pod_asks(task: TaskInfo) -> str:
    """The policy the pod's annotations ask for (pod_policy: ACK's, Koordinator's or Volcano's), with
    "cpuset" / "static-burst" when the scheduler picks its CPUs; "invalid (...)" for a bad one."""
    try:
        spec = read_pod_spec(task)
    except PodPolicyError as error:
        return f"invalid ({error})"
    asks = [spec.policy.value] if spec.policy is not None else []
    if spec.exclusive is not None:
        asks.append(f"singleNUMANodeExclusive {spec.exclusive.value}")
    if spec.cpuset:
        asks.append("static-burst" if spec.static_burst else "cpuset")
    return ", ".join(asks)


def node_policy(task: TaskInfo, topology: NumaTopology) -> NodePolicy:
    policies = topology.policies
    return NodePolicy(
        topology_manager=policies.topology_manager_policy.value,
        scope=policies.topology_manager_scope.value,
        cpu_manager=policies.cpu_manager_policy.value,
        memory_manager=policies.memory_manager_policy,
        pod_asks=_pod_asks(task),
    )


def requested_devices(task: TaskInfo, topology: NumaTopology) -> dict[str, int]:
    """Whole devices the pod asks for, per device resource the topology lists."""
    wanted: dict[str, int] = {}
    for resource in topology.devices:
        amount = task.init_resreq.scalars.get(resource, 0.0)
        if amount > 0:
            wanted[resource] = math.ceil(amount / 1000 - 1e-9)
    return wanted


def numa_picture(task: TaskInfo, node: NodeInfo) -> tuple[NumaNodeView, ...]:
    """Per NUMA node of the node's topology: free against requested CPUs, memory and devices.

    CPUs are those the static CPU manager could still pin (the pod's request counts its whole
    CPUs when it is Guaranteed, else its CPU request); memory is the NUMA node's allocatable
    memory minus what pinned pods hold there; devices are the free healthy ids on that NUMA node.
    """
    topology = node.topology
    if topology is None:
        return ()
    free = free_resources(node)
    cpus_by_numa = topology.cpus_by_numa
    pinned = exclusive_cpus(task) if topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC else 0
    cpu_request = float(pinned) if pinned else task.init_resreq.milli_cpu / 1000
    memory_request = task.init_resreq.memory
    devices = requested_devices(task, topology)
    # Resources the pod asks for that the node has none of: none on any NUMA node either.
    absent = {
        name: amount / 1000
        for name, amount in task.init_resreq.scalars.items()
        if amount > 0
        and name not in devices
        and not is_memory_resource(name)
        and not node.allocatable.scalars.get(name)
    }
    views: list[NumaNodeView] = []
    for numa in topology.numa_ids:
        resources: list[ResourceOnNuma] = []
        if cpu_request > 0:
            on_numa = free.cpus & cpus_by_numa.get(numa, IdSet())
            resources.append(ResourceOnNuma("cpu", float(len(on_numa)), cpu_request))
        if memory_request > 0 and "memory" in free.memory:
            resources.append(ResourceOnNuma("memory", float(free.memory["memory"].get(numa, 0)), memory_request))
        for resource, count in sorted(absent.items()):
            resources.append(ResourceOnNuma(resource, 0.0, count))
        for resource, count in sorted(devices.items()):
            numa_of = {device.id: device.numa for device in topology.devices[resource].devices}
            ids = tuple(device for device in free.free_devices(resource) if numa_of.get(device) == numa)
            resources.append(ResourceOnNuma(resource, float(len(ids)), float(count), ids))
        views.append(NumaNodeView(numa, tuple(resources)))
    return tuple(views)


@attrs.frozen(slots=True)
class ProviderHint:
    """What one hint provider could offer for one resource of one alignment unit (a container, or
    the pod in pod scope), on the node as it is: its best hint (a preferred hint on the fewest
    NUMA nodes), "no preference", or that nothing on the node can satisfy it."""

    unit: str
    provider: str
    resource: str
    best: str


def _best_hint(hints: Sequence[TopologyHint] | None) -> str:
    if hints is None:
        return "no preference"
    if not hints:
        return "cannot be satisfied on this node"
    ranked = sorted(
        hints, key=lambda hint: (not hint.preferred, hint.affinity.count() if hint.affinity is not None else 0)
    )
    return ranked[0].describe()


def provider_hints(ssn: Session, task: TaskInfo, node: NodeInfo) -> tuple[ProviderHint, ...]:
    """Each configured hint provider's best hint per resource, per alignment unit, against what is
    free on the node now (in container scope every container is asked against the same free
    resources: the kubelet would subtract the earlier containers' picks first)."""
    topology = node.topology
    plugin = ssn.plugins.get(NUMA_AWARE)
    providers: list[HintProvider] = list(getattr(plugin, "providers", ()) or ())
    if topology is None or not providers:
        return ()
    if topology.policies.topology_manager_scope is TopologyScope.POD:
        requests = [pod_request(task)]
    else:
        requests = [container_request(task, container) for container in containers_in_order(task)]
    free = free_resources(node)
    found: list[ProviderHint] = []
    for request in requests:
        for provider in providers:
            try:
                hints = provider.hints(request, topology, free)
            except Exception as error:  # a third-party provider's fault is shown, not raised
                found.append(ProviderHint(request.describe(), provider.name, "*", f"failed: {error}"))
                continue
            for resource, resource_hints in sorted((hints or {}).items()):
                found.append(ProviderHint(request.describe(), provider.name, resource, _best_hint(resource_hints)))
    return tuple(found)


def wants_numa_picture(task: TaskInfo, node: NodeInfo, status: Status | None) -> bool:
    """Refused by numa-aware, or a node with topology where the pod would hold pinned resources."""
    if node.topology is None:
        return False
    if status is not None and status.plugin == NUMA_AWARE:
        return True
    topology = node.topology
    static = topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC
    return bool(requested_devices(task, topology)) or (static and exclusive_cpus(task) > 0)


def failures_on(ssn: Session, task: TaskInfo, node: NodeInfo) -> tuple[Status, ...]:
    """The allocate action's resource check (every missing resource), then the session's
    predicates (the first that fails); () when the node takes the pod."""
    missing = task.init_resreq.insufficient_after(node.idle, node.releasing, node.pipelined)
    if missing:
        return tuple(Status.unschedulable(f"Insufficient {name}", RESOURCE_CHECK) for name in missing)
    status = ssn.predicate(task, node)
    return () if status.passed else (status,)


def what_if(ssn: Session, task: TaskInfo, node: NodeInfo) -> tuple[tuple[str, ...] | None, str]:
    """The fewest pods on the node whose departure lets the task in (preemption's dry run)."""
    candidates = [other for other in node.tasks.values() if other.uid != task.uid and other.status in _HOLDING]
    if not candidates:
        return None, "no pod on the node to make room"
    if not could_fit(task, node, candidates):
        return None, "the node is too small even with every pod gone"
    ordered = sorted(candidates, key=functools.cmp_to_key(victim_order(ssn, task)))
    units = units_for(ssn, ordered, gang=False, vote=lambda _evictor, tasks: list(tasks), evictor=task)
    found = VictimSearch(ssn, task, node).smallest(units)
    if found is None:
        emptied = node.clone()
        for other in candidates:
            emptied.remove_task(other)
        left = failures_on(ssn, task, emptied)
        why = ", ".join(_reason(status) for status in left) if left else "refused"
        return None, f"even with every pod gone: {why}"
    keys = tuple(sorted(victim.key for unit in found for victim in unit.tasks))
    if not keys:
        return keys, "fits once the pods already terminating there are gone"
    return keys, f"fits once {len(keys)} pod(s) leave"


def verdict_for(ssn: Session, task: TaskInfo, node: NodeInfo, *, with_what_if: bool) -> NodeVerdict:
    statuses = failures_on(ssn, task, node)
    status = statuses[0] if statuses else None
    picture = wants_numa_picture(task, node, status)
    numa = numa_picture(task, node) if picture else None
    policy = node_policy(task, node.topology) if picture and node.topology is not None else None
    unknown = (
        tuple((resource, count, pods) for resource, (count, pods) in sorted(node.unknown_holdings().items()))
        if picture
        else ()
    )
    hints = provider_hints(ssn, task, node) if picture else ()
    if status is None:
        return NodeVerdict(node.name, True, policy=policy, numa=numa, what_if=(), unknown_held=unknown, hints=hints)
    found: tuple[str, ...] | None = None
    note = ""
    if with_what_if:
        found, note = what_if(ssn, task, node)
    return NodeVerdict(
        node.name,
        False,
        plugin=status.plugin,
        reason=", ".join(_reason(failure) for failure in statuses),
        statuses=statuses,
        policy=policy,
        numa=numa,
        what_if=found,
        what_if_note=note,
        unknown_held=unknown,
        hints=hints,
    )


def _reason(status: Status) -> str:
    return status.reason or f"rejected by {status.plugin or 'a plugin'}"


def _as_pending(ssn: Session, task: TaskInfo) -> str:
    """Take a placed pod off its node in the session's copy, so every node is judged as if it
    were still waiting; returns the node it was on ("" when pending)."""
    placed_on = task.node_name if task.status in _HOLDING else ""
    node = ssn.nodes.get(placed_on) if placed_on else None
    if node is not None:
        node.remove_task(task)
    if placed_on:
        task.status = TaskStatus.PENDING
        task.node_name = ""
        task.allocation = None
    return placed_on


def explain_task(ssn: Session, task: TaskInfo, *, with_what_if: bool = True) -> Explanation:
    """Every node's verdict for the task in an open session (the session's snapshot may change)."""
    placed_on = _as_pending(ssn, task)
    pre = ssn.pre_predicate(task)
    if not pre.passed:
        return Explanation(task.key, placed_on, pre, _reason(pre), ())
    verdicts = tuple(
        verdict_for(ssn, task, node, with_what_if=with_what_if)
        for node in sorted(ssn.nodes.values(), key=lambda node: node.name)
    )
    failed = {verdict.node: verdict.statuses for verdict in verdicts if not verdict.fits}
    fitting = sum(1 for verdict in verdicts if verdict.fits)
    if fitting:
        summary = f"{fitting}/{len(verdicts)} nodes can take the pod"
    else:
        summary = fit_error_summary(len(verdicts), failed)
    return Explanation(task.key, placed_on, pre, summary, verdicts)


def explain_in_cache(
    cache: Cache | ClusterSnapshot,
    config: SchedulerConfig,
    registry: Registry,
    key: str,
    *,
    with_what_if: bool = True,
) -> Explanation:
    """Open a session on a snapshot as a cycle does and explain the pod `namespace/name`. Given the
    cache, the snapshot is taken here; a caller whose cache an event loop updates takes it there and
    passes the snapshot (the session may then run in a worker thread). Raises PodNotFound when no
    pod of ours has that key."""
    snapshot = cache.snapshot() if isinstance(cache, Cache) else cache
    ssn = Session(snapshot, config, registry)
    ssn.open()
    try:
        task = find_task(ssn, key)
        if task is None:
            raise PodNotFound(f"pod {key}: not found among the pods this scheduler schedules")
        return explain_task(ssn, task, with_what_if=with_what_if)
    finally:
        ssn.close()


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def verdict_json(verdict: NodeVerdict) -> dict[str, Any]:
    numa: list[dict[str, Any]] | None = None
    if verdict.numa is not None:
        numa = [
            {
                "numa": view.numa,
                "holdsAll": view.holds_all,
                "resources": [
                    {
                        "resource": resource.resource,
                        "free": _number(resource.free),
                        "requested": _number(resource.requested),
                        **({"freeIds": list(resource.free_ids)} if resource.free_ids else {}),
                    }
                    for resource in view.resources
                ],
            }
            for view in verdict.numa
        ]
    policy: dict[str, str] | None = None
    if verdict.policy is not None:
        policy = {
            "topologyManagerPolicy": verdict.policy.topology_manager,
            "topologyManagerScope": verdict.policy.scope,
            "cpuManagerPolicy": verdict.policy.cpu_manager,
            "memoryManagerPolicy": verdict.policy.memory_manager,
            "podAsks": verdict.policy.pod_asks,
        }
    return {
        "node": verdict.node,
        "fits": verdict.fits,
        "plugin": verdict.plugin,
        "reason": verdict.reason,
        "policy": policy,
        "numa": numa,
        "whatIf": None if verdict.what_if is None else list(verdict.what_if),
        "whatIfNote": verdict.what_if_note,
        "hints": [
            {"unit": hint.unit, "provider": hint.provider, "resource": hint.resource, "best": hint.best}
            for hint in verdict.hints
        ],
        "unknownHeld": {
            resource: {"count": count, "pods": list(pods)} for resource, count, pods in verdict.unknown_held
        },
    }


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    pre = explanation.pre_predicate
    return {
        "pod": explanation.pod,
        "placedOn": explanation.placed_on or None,
        "prePredicate": {"passed": pre.passed, "plugin": pre.plugin, "reason": pre.reason},
        "summary": explanation.summary,
        "nodes": [verdict_json(verdict) for verdict in explanation.nodes],
    }


def explain_pod(
    cache: Cache | ClusterSnapshot,
    config: SchedulerConfig,
    registry: Registry,
    namespace: str,
    name: str,
    *,
    with_what_if: bool = True,
) -> dict[str, Any]:
    """The JSON-able explanation of pod namespace/name against the cache's current state, or a
    snapshot of it (what `numasched explain --output json` prints; the console can serve it).
    Raises PodNotFound."""
    return explanation_json(explain_in_cache(cache, config, registry, f"{namespace}/{name}", with_what_if=with_what_if))


def shortfalls(views: tuple[NumaNodeView, ...]) -> list[str]:
    """Per NUMA node, the resources it lacks: "numa0 nvidia.com/gpu 3/4" (free/requested)."""
    lines: list[str] = []
    for view in views:
        for resource in view.resources:
            if resource.short:
                lines.append(f"numa{view.numa} {resource.resource} {_amount(resource)}")
    return lines


def _amount(resource: ResourceOnNuma) -> str:
    if resource.resource == "memory":
        return f"{resource.free / 2**30:.1f}Gi/{resource.requested / 2**30:.1f}Gi"
    return f"{_number(resource.free)}/{_number(resource.requested)}"


def numa_summary(verdict: NodeVerdict) -> str:
    """One line for the table: the NUMA nodes that could hold the pod alone, or what each lacks."""
    if verdict.numa is None:
        return "-"
    alone = [view.numa for view in verdict.numa if view.holds_all]
    policy = verdict.policy.topology_manager if verdict.policy is not None else ""
    head = f"{policy}: " if policy else ""
    unknown = "".join(
        f"; {count} {resource} held by pods of unknown ids ({', '.join(pods)})"
        for resource, count, pods in verdict.unknown_held
    )
    if alone:
        return head + "fits on numa " + ",".join(str(numa) for numa in alone) + unknown
    return head + "; ".join(shortfalls(verdict.numa)) + " (free/requested)" + unknown
