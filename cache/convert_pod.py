"""Pods, nodes, PodGroups, Queues and PriorityClasses (JSON as the API server returns them) to the
scheduler's model. The same converters serve the Kubernetes informers and the simulator.

Every converter raises ConversionError naming the object and the field that is wrong; the cache
reports it and skips only that object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from numasched.api.allocation import ALLOCATION_ANNOTATION, AllocationError, PodAllocation, allocation_from_json
from numasched.api.job import DEFAULT_QUEUE, JobInfo
from numasched.api.node import NodeInfo, Taint
from numasched.api.quantity import QuantityError, parse_integer, parse_nanos, shown
from numasched.api.resource import CPU, MEMORY, Resource
from numasched.api.task import (
    ContainerInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    QosClass,
    TaskInfo,
    TaskStatus,
    Toleration,
)

GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.volcano.sh/group-name"


class ConversionError(ValueError):
    """An object the scheduler cannot use, with its kind and name."""

    def __init__(self, kind: str, name: str, message: str) -> None:
        super().__init__(f"{kind} {name}: {message}")
        self.kind = kind
        self.name = name
        self.message = message


def _text(value: Any) -> str:
    """A JSON scalar as text, as str() gives it, except that an integer too long for Python to print
    (over 4,300 digits) becomes a short description instead of raising."""
    if isinstance(value, (dict, list)) or (isinstance(value, int) and value.bit_length() > 128):
        return shown(value)
    return str(value)


def _mapping(value: Any, kind: str, name: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConversionError(kind, name, f"{field}: expected an object, got {type(value).__name__}")
    return value


def _sequence(value: Any, kind: str, name: str, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConversionError(kind, name, f"{field}: expected a list, got {type(value).__name__}")
    return value


def _string_map(value: Any, kind: str, name: str, field: str) -> dict[str, str]:
    return {_text(key): _text(item) for key, item in _mapping(value, kind, name, field).items()}


def metadata_of(obj: Mapping[str, Any], kind: str) -> tuple[str, str, Mapping[str, Any]]:
    """(namespace, name, metadata) or ConversionError when the name is missing."""
    if not isinstance(obj, Mapping):
        raise ConversionError(kind, "<unknown>", "not an object")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        raise ConversionError(kind, "<unknown>", "metadata.name is missing")
    return _text(metadata.get("namespace") or ""), _text(metadata["name"]), metadata


def parse_timestamp(value: Any) -> float:
    """RFC 3339 creationTimestamp to epoch seconds; 0 when absent or unreadable (sorts first)."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return 0.0


def _resources(value: Any, kind: str, name: str, field: str) -> Resource:
    try:
        return Resource.from_list(_mapping(value, kind, name, field))
    except QuantityError as error:
        raise ConversionError(kind, name, f"{field}: {error}") from None


def _integer(value: Any, kind: str, name: str, field: str, *, low: int, high: int) -> int:
    """A JSON integer within [low, high] (Go's int32 fields: priority, minMember, weight)."""
    # bool is an int in Python, never in JSON's Go reading.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConversionError(kind, name, f"{field}: expected an integer from {low} to {high}, got {shown(value)}")
    return value


def _boolean(value: Any, kind: str, name: str, field: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConversionError(kind, name, f"{field}: expected true or false, got {shown(value)}")
    return value


def _container(
    raw: Any, kind: str, pod_name: str, field: str, *, init: bool
) -> tuple[ContainerInfo, Mapping[str, Any], Mapping[str, Any]]:
    container = _mapping(raw, kind, pod_name, field)
    name = _text(container.get("name") or "")
    if not name:
        raise ConversionError(kind, pod_name, f"{field}.name is missing")
    resources = _mapping(container.get("resources"), kind, pod_name, f"{field}.resources")
    limits_raw = _mapping(resources.get("limits"), kind, pod_name, f"{field}.resources.limits")
    requests_raw = dict(_mapping(resources.get("requests"), kind, pod_name, f"{field}.resources.requests"))
    # The API server defaults a missing request to the limit.
    for resource_name, limit in limits_raw.items():
        requests_raw.setdefault(resource_name, limit)
    requests = _resources(requests_raw, kind, pod_name, f"{field}.resources.requests")
    limits = _resources(limits_raw, kind, pod_name, f"{field}.resources.limits")
    sidecar = init and container.get("restartPolicy") == "Always"
    return ContainerInfo(name, requests, limits, init=init, sidecar=sidecar), requests_raw, limits_raw


# The resources the kubelet's QoS rule looks at (qos.go: supportedQoSComputeResources).
_QOS_RESOURCES = (CPU, MEMORY)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _positive_qos_amounts(resource_list: Mapping[str, Any]) -> dict[str, int]:
    """The cpu and memory amounts above zero, in nano units (zero quantities are ignored, as the
    kubelet does). Called only on lists that already converted, so every value parses."""
    amounts: dict[str, int] = {}
    for resource_name in _QOS_RESOURCES:
        raw = resource_list.get(resource_name)
        if raw is None:
            continue
        amount = parse_nanos(raw)
        if amount > 0:
            amounts[resource_name] = amount
    return amounts


def qos_class(resource_lists: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> QosClass:
    """ComputePodQOS (kubernetes pkg/apis/core/v1/helper/qos): from (requests, limits) pairs, one per
    container and init container, or the single pod-level pair when the pod declares spec.resources.

    Requests must already carry the API server's defaulting (a missing request equals its limit).
    Sums per resource over the pairs; Guaranteed when every pair limits both cpu and memory above
    zero and the summed requests equal the summed limits for every resource requested or limited.
    """
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for requests_raw, limits_raw in resource_lists:
        for resource_name, amount in _positive_qos_amounts(requests_raw).items():
            requests[resource_name] = requests.get(resource_name, 0) + amount
        limited = _positive_qos_amounts(limits_raw)
        for resource_name, amount in limited.items():
            limits[resource_name] = limits.get(resource_name, 0) + amount
        if len(limited) < len(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QosClass.BEST_EFFORT
    if guaranteed and requests == limits:
        return QosClass.GUARANTEED
    return QosClass.BURSTABLE


def effective_request(containers: Sequence[ContainerInfo], overhead: Resource) -> Resource:
    """The pod's request as the scheduler must account it (KEP-753 sidecars included):
    max(sum of app containers and sidecars, each init container plus the sidecars started
    before it) plus the pod overhead."""
    running = Resource()
    sidecars = Resource()
    peak_init = Resource()
    for container in containers:
        if container.init and container.sidecar:
            sidecars.add(container.requests)
        elif container.init:
            peak_init.set_max(sidecars.clone().add(container.requests))
        else:
            running.add(container.requests)
    running.add(sidecars)
    return running.set_max(peak_init).add(overhead)


def _task_status(spec: Mapping[str, Any], status: Mapping[str, Any], metadata: Mapping[str, Any]) -> TaskStatus:
    phase = _text(status.get("phase") or "Pending")
    if phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if phase == "Failed":
        return TaskStatus.FAILED
    if metadata.get("deletionTimestamp"):
        return TaskStatus.RELEASING
    if not spec.get("nodeName"):
        return TaskStatus.PENDING
    return TaskStatus.RUNNING if phase == "Running" else TaskStatus.BOUND


def _requirements(raw: Any, kind: str, name: str, field: str) -> tuple[NodeSelectorRequirement, ...]:
    result = []
    for index, item in enumerate(_sequence(raw, kind, name, field)):
        entry = _mapping(item, kind, name, f"{field}[{index}]")
        key, operator = entry.get("key"), entry.get("operator")
        if not key or not operator:
            raise ConversionError(kind, name, f"{field}[{index}]: key and operator are required")
        values = tuple(_text(v) for v in _sequence(entry.get("values"), kind, name, f"{field}[{index}].values"))
        result.append(NodeSelectorRequirement(_text(key), _text(operator), values))
    return tuple(result)


def _required_node_terms(spec: Mapping[str, Any], name: str) -> tuple[NodeSelectorTerm, ...]:
    affinity = _mapping(spec.get("affinity"), "Pod", name, "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "Pod", name, "spec.affinity.nodeAffinity")
    field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), "Pod", name, field)
    terms = []
    for index, raw in enumerate(_sequence(required.get("nodeSelectorTerms"), "Pod", name, field)):
        term = _mapping(raw, "Pod", name, f"{field}.nodeSelectorTerms[{index}]")
        terms.append(
            NodeSelectorTerm(
                _requirements(term.get("matchExpressions"), "Pod", name, f"{field}[{index}].matchExpressions"),
                _requirements(term.get("matchFields"), "Pod", name, f"{field}[{index}].matchFields"),
            )
        )
    return tuple(terms)


def _tolerations(spec: Mapping[str, Any], name: str) -> tuple[Toleration, ...]:
    result = []
    for index, raw in enumerate(_sequence(spec.get("tolerations"), "Pod", name, "spec.tolerations")):
        entry = _mapping(raw, "Pod", name, f"spec.tolerations[{index}]")
        result.append(
            Toleration(
                key=_text(entry.get("key") or ""),
                operator=_text(entry.get("operator") or "Equal"),
                value=_text(entry.get("value") or ""),
                effect=_text(entry.get("effect") or ""),
            )
        )
    return tuple(result)


def pod_job_id(namespace: str, name: str, annotations: Mapping[str, str]) -> tuple[str, bool]:
    """(job id, has pod group): a pod's PodGroup, or the pod standing alone as its own job."""
    group = annotations.get(GROUP_NAME_ANNOTATION) or annotations.get(VOLCANO_GROUP_NAME_ANNOTATION)
    if group:
        return f"{namespace}/{group}", True
    return f"{namespace}/{name}", False


def _pod_level_resources(
    spec: Mapping[str, Any], key: str
) -> tuple[Resource, Mapping[str, Any], Mapping[str, Any]] | None:
    """spec.resources (KEP-2837 pod-level resources, on by default since Kubernetes 1.34): the
    pod's cpu and memory budget, which then decides its request and QoS instead of its containers."""
    raw = spec.get("resources")
    if raw is None:
        return None
    resources = _mapping(raw, "Pod", key, "spec.resources")
    limits_raw = _mapping(resources.get("limits"), "Pod", key, "spec.resources.limits")
    requests_raw = dict(_mapping(resources.get("requests"), "Pod", key, "spec.resources.requests"))
    for resource_name, limit in limits_raw.items():
        requests_raw.setdefault(resource_name, limit)
    requests = _resources(requests_raw, "Pod", key, "spec.resources.requests")
    _resources(limits_raw, "Pod", key, "spec.resources.limits")
    return requests, requests_raw, limits_raw


def _declared_qos(status: Mapping[str, Any]) -> QosClass | None:
    """status.qosClass, which the API server sets at creation and the kubelet reads first."""
    declared = status.get("qosClass")
    try:
        return QosClass(declared) if isinstance(declared, str) else None
    except ValueError:
        return None


def pod_to_task(obj: Mapping[str, Any]) -> TaskInfo:
    namespace, name, metadata = metadata_of(obj, "Pod")
    key = f"{namespace}/{name}"
    spec = _mapping(obj.get("spec"), "Pod", key, "spec")
    status = _mapping(obj.get("status"), "Pod", key, "status")
    containers: list[ContainerInfo] = []
    raw_resources: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for field, init in (("initContainers", True), ("containers", False)):
        for index, raw in enumerate(_sequence(spec.get(field), "Pod", key, f"spec.{field}")):
            container, requests_raw, limits_raw = _container(raw, "Pod", key, f"spec.{field}[{index}]", init=init)
            containers.append(container)
            raw_resources.append((requests_raw, limits_raw))
    if not any(not container.init for container in containers):
        raise ConversionError("Pod", key, "spec.containers is empty")
    overhead = _resources(spec.get("overhead"), "Pod", key, "spec.overhead")
    pod_level = _pod_level_resources(spec, key)
    if pod_level is None:
        request = effective_request(containers, overhead)
    else:
        pod_requests, pod_requests_raw, pod_limits_raw = pod_level
        request = effective_request(containers, Resource())
        # kube-scheduler's PodRequests: pod-level cpu and memory replace the containers' sum.
        for resource_name in _QOS_RESOURCES:
            if resource_name in pod_requests_raw:
                if resource_name == CPU:
                    request.milli_cpu = pod_requests.milli_cpu
                else:
                    request.memory = pod_requests.memory
        request.add(overhead)
        raw_resources = [(pod_requests_raw, pod_limits_raw)]
    annotations = _string_map(metadata.get("annotations"), "Pod", key, "metadata.annotations")
    job_id, _ = pod_job_id(namespace, name, annotations)
    priority = spec.get("priority")
    if priority is not None:
        priority = _integer(priority, "Pod", key, "spec.priority", low=_INT32_MIN, high=_INT32_MAX)
    return TaskInfo(
        uid=_text(metadata.get("uid") or key),
        namespace=namespace,
        name=name,
        job_id=job_id,
        resreq=request,
        init_resreq=request.clone(),
        containers=tuple(containers),
        status=_task_status(spec, status, metadata),
        priority=int(priority or 0),
        qos=_declared_qos(status) or qos_class(raw_resources),
        node_name=_text(spec.get("nodeName") or ""),
        scheduler_name=_text(spec.get("schedulerName") or "default-scheduler"),
        node_selector=_string_map(spec.get("nodeSelector"), "Pod", key, "spec.nodeSelector"),
        required_node_terms=_required_node_terms(spec, key),
        tolerations=_tolerations(spec, key),
        labels=_string_map(metadata.get("labels"), "Pod", key, "metadata.labels"),
        annotations=annotations,
        priority_class_name=_text(spec.get("priorityClassName") or ""),
        creation_timestamp=parse_timestamp(metadata.get("creationTimestamp")),
    )


def bound_pod_allocation(task: TaskInfo) -> PodAllocation | None:
    """The allocation a bound pod's numasched.io/allocation annotation records.

    Kept apart from pod_to_task: a bad annotation loses only the CPU/device ledger entry, never
    the pod's resource accounting.
    """
    text = task.annotations.get(ALLOCATION_ANNOTATION)
    if not text or not task.node_name:
        return None
    try:
        return allocation_from_json(text)
    except AllocationError as error:
        raise ConversionError("Pod", task.key, f"annotation {ALLOCATION_ANNOTATION}: {error}") from None


def node_to_node_info(obj: Mapping[str, Any]) -> NodeInfo:
    _, name, metadata = metadata_of(obj, "Node")
    spec = _mapping(obj.get("spec"), "Node", name, "spec")
    status = _mapping(obj.get("status"), "Node", name, "status")
    allocatable_raw = _mapping(status.get("allocatable"), "Node", name, "status.allocatable")
    capacity_raw = _mapping(status.get("capacity"), "Node", name, "status.capacity") or allocatable_raw
    allocatable = _resources(allocatable_raw, "Node", name, "status.allocatable")
    capacity = _resources(capacity_raw, "Node", name, "status.capacity")
    try:
        max_pods = parse_integer(allocatable_raw.get("pods", 110) or 0)
    except QuantityError as error:
        raise ConversionError("Node", name, f"status.allocatable.pods: {error}") from None
    if max_pods < 0:
        raise ConversionError("Node", name, f"status.allocatable.pods: must not be negative, got {max_pods}")
    taints = []
    for index, raw in enumerate(_sequence(spec.get("taints"), "Node", name, "spec.taints")):
        entry = _mapping(raw, "Node", name, f"spec.taints[{index}]")
        taints.append(
            Taint(_text(entry.get("key") or ""), _text(entry.get("value") or ""), _text(entry.get("effect") or ""))
        )
    ready = True
    for raw in _sequence(status.get("conditions"), "Node", name, "status.conditions"):
        condition = _mapping(raw, "Node", name, "status.conditions[]")
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
    node = NodeInfo.create(name, allocatable, capacity)
    node.max_pods = max_pods
    node.labels = _string_map(metadata.get("labels"), "Node", name, "metadata.labels")
    node.taints = tuple(taints)
    node.unschedulable = _boolean(spec.get("unschedulable"), "Node", name, "spec.unschedulable")
    node.ready = ready
    return node


def podgroup_to_job(obj: Mapping[str, Any]) -> JobInfo:
    namespace, name, metadata = metadata_of(obj, "PodGroup")
    key = f"{namespace}/{name}"
    spec = _mapping(obj.get("spec"), "PodGroup", key, "spec")
    status = _mapping(obj.get("status"), "PodGroup", key, "status")
    min_member = _integer(spec.get("minMember", 1), "PodGroup", key, "spec.minMember", low=0, high=_INT32_MAX)
    min_resources_raw = spec.get("minResources")
    return JobInfo(
        uid=key,
        namespace=namespace,
        name=name,
        queue=_text(spec.get("queue") or DEFAULT_QUEUE),
        min_available=min_member,
        priority_class_name=_text(spec.get("priorityClassName") or ""),
        creation_timestamp=parse_timestamp(metadata.get("creationTimestamp")),
        has_pod_group=True,
        pod_group_phase=_text(status.get("phase") or "Pending"),
        min_resources=_resources(min_resources_raw, "PodGroup", key, "spec.minResources")
        if min_resources_raw
        else None,
        annotations=_string_map(metadata.get("annotations"), "PodGroup", key, "metadata.annotations"),
    )


def priority_class_value(obj: Mapping[str, Any]) -> tuple[str, int]:
    _, name, _ = metadata_of(obj, "PriorityClass")
    value = _integer(obj.get("value", 0), "PriorityClass", name, "value", low=_INT32_MIN, high=_INT32_MAX)
    return name, value
