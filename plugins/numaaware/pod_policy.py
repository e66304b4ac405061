"""Pod-level topology policy: what a pod's own annotations ask for, and who enforces it on a node.

Annotations read (docs/policies.md, "Pod-level policy"):

- `scheduling.alibabacloud.com/numa-topology-spec` (ACK) and
  `scheduling.koordinator.sh/numa-topology-spec` (Koordinator): JSON
  `{"numaTopologyPolicy": "SingleNUMANode" | "Restricted" | "BestEffort" | "",
    "singleNUMANodeExclusive": "Required" | "Preferred"}`;
- `volcano.sh/numa-topology-policy` (Volcano): a kubelet policy name (`single-numa-node`, ...);
- `cpuset-scheduler: "true" | "required"` (ACK): the scheduler picks `limits.cpu` CPUs per container
  with a whole-number CPU limit and the node agent pins them, Burstable pods included;
- `cpu-policy: "static-burst"` (ACK): like cpuset-scheduler, and the CPUs are rounded up to whole
  last-level-cache (L3) groups on the NUMA node chosen, where they are free.

Precedence when several name a policy: ACK's spec, then Koordinator's, then Volcano's; the first
present decides the policy and the exclusivity, the others only have to be valid. A value that
cannot be read (any annotation, whichever wins) is a pod-level error naming the annotation and
the value: the pod waits, it is never placed by a guess.

Parsed once per pod (numa-aware keeps the result in the pod's CycleState), never per node.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.resource import Resource
from numasched.api.task import QosClass, TaskInfo, whole_cpus
from numasched.api.topology import CpuManagerPolicy, KubeletPolicies, NumaTopology, TopologyPolicy
from numasched.plugins.numaaware.policy import PolicyError, parse_policy
from numasched.plugins.numaaware.providers.cpu import PREFER_ALIGN_BY_UNCORECACHE
from numasched.plugins.numaaware.providers.topology_memo import TopologyMemo

ACK_SPEC_ANNOTATION = "scheduling.alibabacloud.com/numa-topology-spec"
KOORDINATOR_SPEC_ANNOTATION = "scheduling.koordinator.sh/numa-topology-spec"
VOLCANO_POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"
CPUSET_ANNOTATION = "cpuset-scheduler"
CPU_POLICY_ANNOTATION = "cpu-policy"
STATIC_BURST = "static-burst"

# Every annotation this module reads, in precedence order for the policy (the equivalence key of
# numa-aware reads all of them).
POD_POLICY_ANNOTATIONS = (
    ACK_SPEC_ANNOTATION,
    KOORDINATOR_SPEC_ANNOTATION,
    VOLCANO_POLICY_ANNOTATION,
    CPUSET_ANNOTATION,
    CPU_POLICY_ANNOTATION,
)

# Koordinator's / ACK's spelling of the topology manager policies.
_SPEC_POLICIES = {
    "": TopologyPolicy.NONE,
    "None": TopologyPolicy.NONE,
    "BestEffort": TopologyPolicy.BEST_EFFORT,
    "Restricted": TopologyPolicy.RESTRICTED,
    "SingleNUMANode": TopologyPolicy.SINGLE_NUMA_NODE,
}
_SPEC_FIELDS = ("numaTopologyPolicy", "singleNUMANodeExclusive")
_CPUSET_VALUES = {"true": True, "required": True, "false": False}


class Exclusivity(enum.StrEnum):
    """Koordinator's singleNUMANodeExclusive."""

    REQUIRED = "Required"
    PREFERRED = "Preferred"


class PodPolicyError(ValueError):
    """An annotation the pod carries whose value cannot be used; the message names both."""

    def __init__(self, annotation: str, value: str, why: str, *, message: str = "") -> None:
        super().__init__(f"annotation {annotation}: {message or f'{value!r:.80} {why}'}")
        self.annotation = annotation


@attrs.frozen(slots=True)
class PodTopologySpec:
    """What the pod asks for beyond its requests."""

    # The topology policy the pod asks for; None when no annotation names one.
    policy: TopologyPolicy | None = None
    # singleNUMANodeExclusive (given, or Koordinator's default Required when a numa-topology-spec
    # names a policy and leaves it out); None: the pod does not take part.
    exclusive: Exclusivity | None = None
    # The scheduler chooses the CPUs and the agent pins them where the kubelet does not.
    cpuset: bool = False
    # Round the pinned CPUs up to whole L3 groups (implies cpuset).
    static_burst: bool = False
    # The annotation the policy came from ("" when none), for messages.
    policy_source: str = ""


def _spec(annotation: str, raw: str) -> tuple[TopologyPolicy | None, Exclusivity | None]:
    """A numa-topology-spec value: its policy (None when it names none) and exclusivity."""
    try:
        document: Any = json.loads(raw)
    except (ValueError, RecursionError):
        raise PodPolicyError(annotation, raw, "is not JSON") from None
    if not isinstance(document, Mapping):
        raise PodPolicyError(annotation, raw, 'must be a JSON object like {"numaTopologyPolicy": "SingleNUMANode"}')
    unknown = sorted(str(key) for key in document if key not in _SPEC_FIELDS)
    if unknown:
        raise PodPolicyError(
            annotation, raw, f"has unknown field(s) {', '.join(unknown)}; known: {', '.join(_SPEC_FIELDS)}"
        )
    raw_policy = document.get("numaTopologyPolicy", "")
    if not isinstance(raw_policy, str) or raw_policy not in _SPEC_POLICIES:
        valid = ", ".join(repr(name) for name in _SPEC_POLICIES if name)
        raise PodPolicyError(annotation, raw, f"has numaTopologyPolicy {raw_policy!r:.40}; valid: {valid}")
    policy = _SPEC_POLICIES[raw_policy]
    raw_exclusive = document.get("singleNUMANodeExclusive", "")
    if raw_exclusive == "":
        # Koordinator: a pod that names a policy and no exclusivity is Required.
        exclusive = Exclusivity.REQUIRED if policy is not TopologyPolicy.NONE else None
    elif isinstance(raw_exclusive, str) and raw_exclusive in {item.value for item in Exclusivity}:
        exclusive = Exclusivity(raw_exclusive)
    else:
        valid = ", ".join(repr(item.value) for item in Exclusivity)
        raise PodPolicyError(annotation, raw, f"has singleNUMANodeExclusive {raw_exclusive!r:.40}; valid: {valid}")
    return (policy if raw_policy else None), exclusive


def _volcano(raw: str) -> TopologyPolicy | None:
    if not raw.strip():
        return None
    try:
        return parse_policy(raw)
    except PolicyError as error:
        raise PodPolicyError(VOLCANO_POLICY_ANNOTATION, raw, "", message=str(error)) from None


def agent_cpus(task: TaskInfo) -> dict[str, int]:
    """CPUs a cpuset-scheduler pod has pinned per container: its whole-number CPU limit (ACK pins
    `limits.cpu`); containers without one run unpinned."""
    pinned: dict[str, int] = {}
    for container in task.containers:
        count = whole_cpus(container.limits.milli_cpu)
        if count:
            pinned[container.name] = count
    return pinned


def read_pod_spec(task: TaskInfo) -> PodTopologySpec:
    """The pod's topology spec from its annotations; PodPolicyError names a bad one."""
    annotations = task.annotations
    policy: TopologyPolicy | None = None
    exclusive: Exclusivity | None = None
    source = ""
    # Every annotation present is read (a bad value is reported even when another one wins).
    for annotation in (ACK_SPEC_ANNOTATION, KOORDINATOR_SPEC_ANNOTATION):
        raw = annotations.get(annotation)
        if raw is None:
            continue
        spec_policy, spec_exclusive = _spec(annotation, raw)
        if not source and spec_policy is not None:
            policy, exclusive, source = spec_policy, spec_exclusive, annotation
        elif not source and exclusive is None:
            exclusive = spec_exclusive
    raw_volcano = annotations.get(VOLCANO_POLICY_ANNOTATION)
    if raw_volcano is not None:
        volcano = _volcano(raw_volcano)
        if not source and volcano is not None:
            policy, source = volcano, VOLCANO_POLICY_ANNOTATION
    cpuset = False
    raw_cpuset = annotations.get(CPUSET_ANNOTATION)
    if raw_cpuset is not None:
        value = _CPUSET_VALUES.get(raw_cpuset.strip().lower())
        if value is None:
            raise PodPolicyError(CPUSET_ANNOTATION, raw_cpuset, 'is not "true", "required" or "false"')
        cpuset = value
    static_burst = False
    raw_cpu_policy = annotations.get(CPU_POLICY_ANNOTATION)
    if raw_cpu_policy is not None:
        if raw_cpu_policy.strip() != STATIC_BURST:
            raise PodPolicyError(CPU_POLICY_ANNOTATION, raw_cpu_policy, f'is not "{STATIC_BURST}"')
        static_burst = cpuset = True
    if cpuset and not agent_cpus(task):
        name = CPU_POLICY_ANNOTATION if static_burst else CPUSET_ANNOTATION
        raw = raw_cpu_policy if static_burst else raw_cpuset
        raise PodPolicyError(name, raw or "", "asks for pinned CPUs, but no container has a whole-number cpu limit")
    return PodTopologySpec(policy, exclusive, cpuset, static_burst, source)


class Enforcer(enum.Enum):
    """Who makes the node follow a pod's decision."""

    # The kubelet's CPU manager and Topology Manager (node-level policy); the scheduler only
    # admits where they will, a pod policy stricter than the node's is a scheduler-side filter.
    KUBELET = "kubelet"
    # numasched chooses the CPUs under the pod's policy and the node agent pins them.
    AGENT = "agent"


def enforcer(spec: PodTopologySpec, task: TaskInfo, policies: KubeletPolicies) -> Enforcer | str:
    """Who enforces this pod's CPUs on a node with these kubelet policies, or why the node cannot
    take it (a reason that names neither node nor pod, so equal nodes group).

    The static CPU manager owns every container's cpuset on its node: it pins Guaranteed pods'
    whole CPUs itself, and rewrites every other container's cpuset to the shared pool on each
    reconcile, so an agent's pin would be undone, and the CPUs it pinned could be handed out
    exclusively by the kubelet to the next Guaranteed pod. So a cpuset pod goes to a static node
    only when the kubelet pins it itself (Guaranteed: request = limit, the same count)."""
    if not spec.cpuset:
        return Enforcer.KUBELET
    if policies.cpu_manager_policy != CpuManagerPolicy.STATIC:
        return Enforcer.AGENT
    if task.qos is QosClass.GUARANTEED:
        return Enforcer.KUBELET
    return (
        f"node(s) run the static CPU manager, which would undo the agent's cpuset for a "
        f"{task.qos.value} pod ({CPUSET_ANNOTATION} needs cpuManagerPolicy none there)"
    )


def effective_policy(spec: PodTopologySpec, node_policy: TopologyPolicy, who: Enforcer) -> TopologyPolicy:
    """The policy the pod is aligned with: the stricter of the node's and the pod's; an agent-pinned
    pod that names none prefers one NUMA node (best-effort), as ACK's cpuset-scheduler does."""
    requested = spec.policy
    if who is Enforcer.AGENT and (requested is None or requested is TopologyPolicy.NONE):
        requested = TopologyPolicy.BEST_EFFORT
    if requested is None or node_policy.strictness >= requested.strictness:
        return node_policy
    return requested


# -- the agent's view: the same admission code, with the pod's policy in place of the node's ----------


def agent_task(task: TaskInfo) -> TaskInfo:
    """The pod as the CPU provider must see it to pin what cpuset-scheduler asks for: Guaranteed,
    each container asking for its whole-number CPU limit (none for the others). Only admission
    reads this view; the pod itself is never changed."""
    containers = tuple(
        attrs.evolve(
            container,
            requests=Resource(
                float(whole_cpus(container.limits.milli_cpu) * 1000),
                container.requests.memory,
                dict(container.requests.scalars),
            ),
        )
        for container in task.containers
    )
    return attrs.evolve(task, qos=QosClass.GUARANTEED, containers=containers, allocation=None)


def _agent_topology(topology: NumaTopology, *, align_by_l3: bool) -> NumaTopology:
    """The node as if its kubelet ran the static CPU manager (the agent pins what is decided).
    The memory manager stays off: no kubelet pins the memory of these pods; the agent sets the
    decided NUMA nodes as cpuset.mems. align_by_l3 (static-burst) packs CPUs by L3 group."""
    options = dict(topology.policies.cpu_manager_options)
    if align_by_l3:
        options[PREFER_ALIGN_BY_UNCORECACHE] = "true"
        options.pop("distribute-cpus-across-numa", None)
    policies = attrs.evolve(
        topology.policies,
        cpu_manager_policy=CpuManagerPolicy.STATIC,
        cpu_manager_options=options,
        memory_manager_policy="None",
    )
    return attrs.evolve(topology, policies=policies)


class AgentViews:
    """The agent's view of each node topology, built once per topology object (so the admission
    tables and provider indexes that key on the object keep working across pods and sessions)."""

    def __init__(self) -> None:
        self._plain: TopologyMemo[NumaTopology] = TopologyMemo(lambda t: _agent_topology(t, align_by_l3=False))
        self._burst: TopologyMemo[NumaTopology] = TopologyMemo(lambda t: _agent_topology(t, align_by_l3=True))

    def topology(self, topology: NumaTopology, spec: PodTopologySpec) -> NumaTopology:
        return (self._burst if spec.static_burst else self._plain).get(topology)
