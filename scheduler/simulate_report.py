"""What `numasched simulate` prints: per pod its placement or the reason it has none, the objects
that were skipped, and a summary. The JSON form is a stable interface (docs/simulate.md)."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import yaml

from numasched.api.allocation import ALLOCATION_ANNOTATION, AllocationError, allocation_from_json
from numasched.cache.convert_pod import GROUP_NAME_ANNOTATION, VOLCANO_GROUP_NAME_ANNOTATION, pod_job_id
from numasched.cache.dra_store import pod_claim_refs
from numasched.cache.sim_evictor import SimEviction
from numasched.cache.simcluster import SimCluster

REPORT_VERSION = 1


@attrs.frozen(slots=True)
class ClaimPlacement:
    """One ResourceClaim of a pod and the devices its status.allocation names."""

    pod_claim: str  # the entry's name in pod.spec.resourceClaims
    claim: str  # namespace/name of the ResourceClaim ("" when not created yet)
    # (request, driver, pool, device) per allocation result.
    devices: tuple[tuple[str, str, str, str], ...] = ()


@attrs.frozen(slots=True)
class PodPlacement:
    namespace: str
    name: str
    job: str
    status: str  # Bound | Unschedulable | Pending
    node: str = ""
    numa: tuple[int, ...] = ()
    cpuset: str = ""
    devices: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    reason: str = ""
    claims: tuple[ClaimPlacement, ...] = ()


@attrs.frozen(slots=True)
class Problem:
    source: str
    message: str


@attrs.frozen(slots=True)
class NodeWithoutTopology:
    """A node the numa-aware plugin cannot align on: its topology is "missing" or "rejected: why"."""

    node: str
    topology: str


@attrs.frozen(slots=True)
class SimulationReport:
    pods: tuple[PodPlacement, ...]
    problems: tuple[Problem, ...]
    nodes: int
    cycles: int
    seconds: float
    nodes_without_topology: tuple[NodeWithoutTopology, ...] = ()
    # Pods preempt / reclaim evicted, in the order they went.
    evictions: tuple[SimEviction, ...] = ()

    def count(self, status: str) -> int:
        return sum(1 for pod in self.pods if pod.status == status)


def _object(value: Any) -> Mapping[str, Any]:
    """A field that should hold an object; anything else (the cache has reported it) reads as empty."""
    return value if isinstance(value, Mapping) else {}


def _condition_message(pod: Mapping[str, Any]) -> str:
    conditions = _object(pod.get("status")).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def _placement(pod: Mapping[str, Any], waiting: Mapping[str, str]) -> tuple[PodPlacement, Problem | None]:
    metadata = _object(pod.get("metadata"))
    namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name"))
    annotations = _object(metadata.get("annotations"))
    group = str(annotations.get(GROUP_NAME_ANNOTATION) or annotations.get(VOLCANO_GROUP_NAME_ANNOTATION) or "")
    node = str(_object(pod.get("spec")).get("nodeName") or "")
    if not node:
        reason = _condition_message(pod) or waiting.get(f"{namespace}/{name}", "")
        status = "Unschedulable" if reason else "Pending"
        return PodPlacement(namespace, name, group, status, reason=reason), None
    problem = None
    numa: set[int] = set()
    cpuset = ""
    devices: dict[str, list[str]] = {}
    text = str(annotations.get(ALLOCATION_ANNOTATION) or "")
    if text:
        try:
            allocation = allocation_from_json(text)
        except AllocationError as error:
            problem = Problem(f"Pod {namespace}/{name}", f"annotation {ALLOCATION_ANNOTATION}: {error}")
        else:
            numa = set(allocation.numa().ids())
            cpuset = allocation.cpus().format()
            for container in allocation.containers:
                for resource, ids in container.devices.items():
                    devices.setdefault(resource, []).extend(ids)
    return (
        PodPlacement(
            namespace,
            name,
            group,
            "Bound",
            node=node,
            numa=tuple(sorted(numa)),
            cpuset=cpuset,
            devices={resource: tuple(ids) for resource, ids in sorted(devices.items())},
        ),
        problem,
    )


def _claim_results(claim: Mapping[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
    allocation = _object(_object(claim.get("status")).get("allocation"))
    results = _object(allocation.get("devices")).get("results")
    listed = results if isinstance(results, list) else []
    return tuple(
        (str(r.get("request", "")), str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in listed
        if isinstance(r, Mapping)
    )


def pod_claims(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> tuple[ClaimPlacement, ...]:
    """The pod's ResourceClaims (spec.resourceClaims, resolved through status.resourceClaimStatuses
    for templates) with the devices allocated to each."""
    refs, statuses, _ = pod_claim_refs(pod)
    namespace = str(_object(pod.get("metadata")).get("namespace") or "default")
    found: list[ClaimPlacement] = []
    for ref in refs:
        name = ref.claim_name if ref.claim_name is not None else statuses.get(ref.name)
        if not name:
            found.append(ClaimPlacement(ref.name, ""))
            continue
        claim = claims.get(f"{namespace}/{name}")
        found.append(ClaimPlacement(ref.name, f"{namespace}/{name}", _claim_results(claim) if claim else ()))
    return tuple(found)


def build_report(
    cluster: SimCluster, *, cycles: int, seconds: float, evictions: Sequence[SimEviction] = ()
) -> SimulationReport:
    waiting = {
        task.key: f"waiting for PodGroup {pod_job_id(task.namespace, task.name, task.annotations)[0]}"
        for task in cluster.cache.tasks_waiting_for_group()
    }
    placements: list[PodPlacement] = []
    problems = [Problem(p.source, p.message) for p in cluster.load_problems]
    problems.extend(Problem(f"{kind} {name}", message) for (kind, name), message in cluster.cache.problems.items())
    problems.extend(
        Problem(f"{kind} {name}", f"read with a warning: {message}")
        for (kind, name), message in cluster.cache.warnings.items()
    )
    for pod in cluster.pods():
        if _object(pod.get("spec")).get("schedulerName") not in cluster.cache.scheduler_names:
            continue
        placement, problem = _placement(pod, waiting)
        claims = pod_claims(pod, cluster.objects["ResourceClaim"])
        placements.append(attrs.evolve(placement, claims=claims) if claims else placement)
        if problem is not None:
            problems.append(problem)
    placements.sort(key=lambda p: (p.namespace, p.name))
    return SimulationReport(
        pods=tuple(placements),
        problems=tuple(problems),
        nodes=len(cluster.objects["Node"]),
        cycles=cycles,
        seconds=seconds,
        nodes_without_topology=tuple(
            NodeWithoutTopology(node, state) for node, state in cluster.cache.nodes_without_topology().items()
        ),
        evictions=tuple(evictions),
    )


def report_document(report: SimulationReport) -> dict[str, Any]:
    """The documented JSON/YAML shape (docs/simulate.md)."""
    return {
        "version": REPORT_VERSION,
        "summary": {
            "pods": len(report.pods),
            "bound": report.count("Bound"),
            "unschedulable": report.count("Unschedulable"),
            "pending": report.count("Pending"),
            "nodes": report.nodes,
            "cycles": report.cycles,
            "seconds": round(report.seconds, 3),
            "evicted": len(report.evictions),
        },
        "pods": [
            {
                "namespace": pod.namespace,
                "name": pod.name,
                "job": pod.job,
                "status": pod.status,
                "node": pod.node,
                "numa": list(pod.numa),
                "cpuset": pod.cpuset,
                "devices": {resource: list(ids) for resource, ids in pod.devices.items()},
                "reason": pod.reason,
                "claims": [
                    {
                        "name": claim.pod_claim,
                        "claim": claim.claim,
                        "devices": [
                            {"request": request, "driver": driver, "pool": pool, "device": device}
                            for request, driver, pool, device in claim.devices
                        ],
                    }
                    for claim in pod.claims
                ],
            }
            for pod in report.pods
        ],
        "problems": [{"source": problem.source, "message": problem.message} for problem in report.problems],
        "nodesWithoutTopology": [
            {"node": item.node, "topology": item.topology} for item in report.nodes_without_topology
        ],
        "evictions": [
            {"pod": eviction.pod, "node": eviction.node, "reason": eviction.reason} for eviction in report.evictions
        ],
    }


def render(report: SimulationReport, output: str) -> str:
    if output == "json":
        return json.dumps(report_document(report), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(report_document(report), sort_keys=False, width=120)
    return _render_table(report)


def _render_table(report: SimulationReport) -> str:
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    # As wide as the terminal running us (160 columns when output goes to a file or pipe).
    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    placed = Table(title="Placements", title_justify="left", show_lines=False)
    for column in ("POD", "JOB", "NODE", "NUMA", "CPUS", "DEVICES"):
        placed.add_column(column, overflow="fold")
    for pod in report.pods:
        if pod.status != "Bound":
            continue
        devices = " ".join(f"{resource}={','.join(ids)}" for resource, ids in pod.devices.items())
        placed.add_row(
            f"{pod.namespace}/{pod.name}",
            pod.job or "-",
            pod.node,
            ",".join(map(str, pod.numa)) or "-",
            pod.cpuset or "shared",
            devices or "-",
        )
    console.print(placed)
    claimed = [pod for pod in report.pods if pod.claims]
    if claimed:
        table = Table(title="ResourceClaims", title_justify="left")
        for column in ("POD", "POD CLAIM", "CLAIM", "DEVICES"):
            table.add_column(column, overflow="fold")
        for pod in claimed:
            for claim in pod.claims:
                devices = " ".join(f"{request}={driver}/{pool}/{name}" for request, driver, pool, name in claim.devices)
                table.add_row(
                    f"{pod.namespace}/{pod.name}", claim.pod_claim, claim.claim or "(not created)", devices or "-"
                )
        console.print(table)
    unplaced = [pod for pod in report.pods if pod.status != "Bound"]
    if unplaced:
        table = Table(title="Not placed", title_justify="left")
        for column in ("POD", "JOB", "STATUS", "REASON"):
            table.add_column(column, overflow="fold")
        for pod in unplaced:
            table.add_row(f"{pod.namespace}/{pod.name}", pod.job or "-", pod.status, pod.reason or "-")
        console.print(table)
    if report.nodes_without_topology:
        table = Table(title="Nodes without usable NUMA topology", title_justify="left")
        table.add_column("NODE", overflow="fold")
        table.add_column("TOPOLOGY", overflow="fold")
        for item in report.nodes_without_topology:
            table.add_row(item.node, item.topology)
        console.print(table)
    if report.evictions:
        table = Table(title="Evicted", title_justify="left")
        for column in ("POD", "NODE", "REASON"):
            table.add_column(column, overflow="fold")
        for eviction in report.evictions:
            table.add_row(eviction.pod, eviction.node, eviction.reason)
        console.print(table)
    if report.problems:
        table = Table(title="Skipped objects", title_justify="left")
        table.add_column("OBJECT", overflow="fold")
        table.add_column("PROBLEM", overflow="fold")
        for problem in report.problems:
            table.add_row(problem.source, problem.message)
        console.print(table)
    console.print(
        f"{report.count('Bound')}/{len(report.pods)} pods bound, {report.count('Unschedulable')} unschedulable, "
        f"{report.count('Pending')} pending, on {report.nodes} nodes in {report.cycles} cycles "
        f"({report.seconds:.2f}s)"
    )
    return buffer.getvalue()
