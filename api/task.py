"""A pod as the scheduler sees it: its requests per container, constraints and status."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.resource import Resource

if TYPE_CHECKING:
    # Types only: api.dra (which the claims module reads) imports this module.
    from numasched.api.dra_claims import PodClaims


class TaskStatus(enum.Enum):
    # Members are singletons compared by identity: hashed by identity too, in C (Enum's own
    # __hash__ is a Python call, and statuses are looked up in sets per task many times a cycle).
    __hash__ = object.__hash__

    PENDING = "Pending"
    ALLOCATED = "Allocated"
    PIPELINED = "Pipelined"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# Statuses that count toward a gang's minAvailable (Volcano's ReadyTaskNum).
READY_STATUSES = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING, TaskStatus.SUCCEEDED}
)


class QosClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@attrs.frozen(slots=True)
class ContainerInfo:
    name: str
    requests: Resource
    limits: Resource
    init: bool = False
    # An init container with restartPolicy: Always (a sidecar) keeps its resources for the pod's life.
    sidecar: bool = False


@attrs.frozen(slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@attrs.frozen(slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@attrs.frozen(slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@attrs.define(slots=True)
class TaskInfo:
    uid: str
    namespace: str
    name: str
    job_id: str
    resreq: Resource
    init_resreq: Resource
    containers: tuple[ContainerInfo, ...] = ()
    status: TaskStatus = TaskStatus.PENDING
    priority: int = 0
    qos: QosClass = QosClass.BEST_EFFORT
    node_name: str = ""
    scheduler_name: str = ""
    node_selector: dict[str, str] = attrs.field(factory=dict)
    required_node_terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    labels: dict[str, str] = attrs.field(factory=dict)
    annotations: dict[str, str] = attrs.field(factory=dict)
    priority_class_name: str = ""
    creation_timestamp: float = 0.0
    allocation: PodAllocation | None = None
    # The last reason this task could not be placed, for events and simulate output.
    fit_error: str = ""
    # The pod's ResourceClaims (spec.resourceClaims), resolved by the cache at each snapshot.
    claims: PodClaims | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def best_effort(self) -> bool:
        """No CPU or memory request: placed by backfill, never blocks a gang."""
        return self.init_resreq.milli_cpu < 0.01 and self.init_resreq.memory < 1

    def clone(self) -> TaskInfo:
        return attrs.evolve(self, resreq=self.resreq.clone(), init_resreq=self.init_resreq.clone())


def whole_cpus(milli_cpu: float) -> int:
    """The CPU count when a request is a positive whole number of CPUs, else 0 (the static CPU
    manager pins CPUs only for such requests)."""
    rounded = round(milli_cpu)
    if rounded <= 0 or abs(milli_cpu - rounded) > 1e-6 or rounded % 1000 != 0:
        return 0
    return rounded // 1000


def pod_whole_cpus(containers: Iterable[ContainerInfo]) -> int:
    """Whole CPUs a pod's containers ask for at most at one time: the larger of its init phase
    (sidecars started so far plus the init container running) and its steady state (app
    containers plus sidecars), as the kubelet's pod-scope CPU accounting sums them."""
    by_init = by_sidecars = by_apps = 0
    for container in containers:
        cpus = whole_cpus(container.requests.milli_cpu)
        if container.init and container.sidecar:
            by_sidecars += cpus
        elif container.init:
            by_init = max(by_init, by_sidecars + cpus)
        else:
            by_apps += cpus
    return max(by_init, by_apps + by_sidecars)
