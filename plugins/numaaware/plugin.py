"""The numa-aware plugin: place pods only where the kubelet's Topology Manager admits them, prefer
nodes where they span the fewest NUMA nodes, and record the CPUs, devices and memory chosen.

Arguments (volcano-scheduler.conf):
  weight          multiplies the 0-100 NUMA score (default 1)
  devices         device resource names the device provider aligns (default: its own list)
  hint-providers  extra providers by name, from the numasched.hint_providers entry points
  unknown-topology  refuse-pinned (default) | allow: whether pods that need exclusive CPUs or
                  aligned devices may go to nodes whose topology is missing or was rejected
Any other argument is handed to the provider factories (e.g. nic-resources, nic-alignment).
An argument of the wrong type or value is a configuration error (PluginArgumentError), never a
silent fallback to a default.

Unknown holders (docs/topology.md): where pods hold CPUs or devices whose ids no source reports,
the providers admit a request only if it fits however those holdings lie, and the ids the node's
kubelet will choose for such a resource cannot be promised: the decision keeps the NUMA nodes but
no ids for that resource, and the pod itself counts as a holder of unknown ids for the rest of
the session (its annotation will say the same to the next cycle's cache).

Pod annotation volcano.sh/numa-topology-policy asks for a policy; when it is stricter than the
node's kubelet policy it is enforced here on the scheduler side. ACK's and Koordinator's pod-level
annotations (pod_policy.py: numa-topology-spec, cpuset-scheduler, cpu-policy: static-burst) add
agent-pinned CPUs decided under the pod's policy, singleNUMANodeExclusive (exclusivity.py) and
L3 rounding (providers/cpu_burst.py); docs/policies.md, "Node-level and pod-level policy".

Scores: fewer NUMA nodes first (Volcano's normalisation, 0-100 times weight); for device pods,
plus up to a quarter of that for the better-linked device set (link_bonuses).

A plugin implementing restriction.RestrictsNuma (numa-affinity-group) may keep a pod with its
group: a node is then admitted only when the pod's placement there (and its gang companions'
after it) stays on the group's NUMA nodes.

Per feasible node the predicate only decides admission and the NUMA span the score needs
(admission.admit_pod: hints and merge where that is exact, the full placement otherwise). The
decision is kept, per node, for the task being decided; on_allocate completes the one for the
chosen node when the node is still as the predicate saw it, and places afresh otherwise.
"""

from __future__ import annotations

import enum
import functools
import json
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np
import structlog

from numasched.api.allocation import PodAllocation
from numasched.api.hint import TopologyHint
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, UnknownHolder
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import (
    DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
    NumaTopology,
    TopologyPolicy,
    topology_availability_key,
    topology_content_key,
    topology_shape_key,
)
from numasched.plugins.numaaware.admission import (
    UNASKED,
    Admission,
    DecisionUnit,
    MergeMemo,
    Placement,
    Unasked,
    UnitPlan,
    admit_pod,
    allocate_admitted,
    place_pod,
    pod_request,
    unit_plan,
)
from numasched.plugins.numaaware.exclusivity import (
    EXCLUSIVE_POLICIES,
    NumaOccupancy,
    avoid_sets,
    conflict,
    describe_conflict,
    occupancy,
    without_numa,
)
from numasched.plugins.numaaware.pod_policy import (
    POD_POLICY_ANNOTATIONS,
    AgentViews,
    Enforcer,
    Exclusivity,
    PodPolicyError,
    PodTopologySpec,
    agent_task,
    effective_policy,
    enforcer,
    read_pod_spec,
)
from numasched.plugins.numaaware.policy import PolicyError, check_numa_node_limit, parse_policy
from numasched.plugins.numaaware.providers.base import FreeResources, HintProvider, free_after, free_resources
from numasched.plugins.numaaware.providers.cpu import cpu_provider_factory, guaranteed_cpus
from numasched.plugins.numaaware.providers.cpu_burst import burst_allocation
from numasched.plugins.numaaware.providers.device import (
    ARG_DEVICE_RESOURCES,
    DeviceProvider,
    device_provider_factory,
    requested_devices,
)
from numasched.plugins.numaaware.providers.device_sets import set_quality
from numasched.plugins.numaaware.providers.dra import dra_provider_factory
from numasched.plugins.numaaware.providers.memory import memory_provider_factory
from numasched.plugins.numaaware.providers.topology_memo import ContentMemo, TopologyMemo
from numasched.plugins.numaaware.restriction import NumaRestriction, any_restricting, keeps_group, restriction_of
from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError
from numasched.scheduler.framework.cycle_state import CycleState
from numasched.scheduler.framework.equivalence import CandidateParts, Candidates, Floats, Ints, Objects
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode

if TYPE_CHECKING:
    from numasched.scheduler.framework.session import Event, Session

PLUGIN_NAME = "numa-aware"
POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"
ARG_WEIGHT = "weight"
ARG_DEVICES = "devices"
ARG_HINT_PROVIDERS = "hint-providers"
ARG_UNKNOWN_TOPOLOGY = "unknown-topology"
MAX_NODE_SCORE = 100
# cpu, device, memory, dra (builtin_providers).
BUILTIN_PROVIDER_COUNT = 4
# Link quality adds at most a quarter of the NUMA score's range.
LINK_SCORE_SHARE = 4

_log = structlog.get_logger(__name__)


class UnknownTopology(enum.StrEnum):
    """What to do with pods that need pinning on a node without usable topology."""

    REFUSE_PINNED = "refuse-pinned"
    ALLOW = "allow"


def unknown_topology_choice(arguments: Arguments) -> UnknownTopology:
    raw = arguments.get_str(ARG_UNKNOWN_TOPOLOGY, UnknownTopology.REFUSE_PINNED.value)
    try:
        return UnknownTopology(raw.strip().lower())
    except ValueError:
        choices = ", ".join(choice.value for choice in UnknownTopology)
        raise arguments.invalid(ARG_UNKNOWN_TOPOLOGY, f"expected one of {choices}, got {raw!r}") from None


def pinned_needs(task: TaskInfo, device_resources: frozenset[str]) -> str:
    """What of the pod the kubelet would pin: "4 exclusive CPUs and 2 nvidia.com/gpu"; "" when
    nothing (not Guaranteed with integer CPUs, and no aligned device asked for)."""
    request = pod_request(task)
    needs: list[str] = []
    cpus = guaranteed_cpus(request)
    if cpus:
        needs.append(f"{cpus} exclusive CPUs")
    for resource in sorted(device_resources):
        count = requested_devices(request, resource)
        if count:
            needs.append(f"{count} {resource}")
    return " and ".join(needs)


def without_unknown_ids(
    allocation: PodAllocation, unknown_resources: frozenset[str]
) -> tuple[PodAllocation, dict[str, int]]:
    """The allocation without the ids of resources that have unknown holders (the kubelet will
    choose them; any id we named might be taken), and how many ids were left out per resource.
    NUMA nodes stay: they are what was aligned."""
    if not unknown_resources:
        return allocation, {}
    left_out: dict[str, int] = {}
    containers = []
    for container in allocation.containers:
        cpuset = container.cpuset
        if "cpu" in unknown_resources and cpuset:
            left_out["cpu"] = left_out.get("cpu", 0) + len(cpuset)
            cpuset = IdSet()
        devices = {}
        for resource, ids in container.devices.items():
            if resource in unknown_resources:
                left_out[resource] = left_out.get(resource, 0) + len(ids)
            else:
                devices[resource] = ids
        containers.append(attrs.evolve(container, cpuset=cpuset, devices=devices))
    if not left_out:
        return allocation, {}
    return PodAllocation(tuple(containers)), left_out


def pod_policy(task: TaskInfo) -> TopologyPolicy | None:
    """The policy the pod asks for; None when it asks for none. Raises PolicyError on a bad value."""
    raw = task.annotations.get(POLICY_ANNOTATION)
    if raw is None or not raw.strip():
        return None
    return parse_policy(raw)


def stricter(first: TopologyPolicy, second: TopologyPolicy | None) -> TopologyPolicy:
    if second is None or first.strictness >= second.strictness:
        return first
    return second


def link_bonuses(qualities: Iterable[tuple[int, ...]], weight: int) -> dict[tuple[int, ...], float]:
    """Between nodes that admit a device pod: the better-linked set scores higher (NVLinks, then
    PCIe closeness, then the largest aligned block left free), ranked 0 to MAX_NODE_SCORE /
    LINK_SCORE_SHARE times weight, so the NUMA span stays the first criterion. The bonus per
    distinct quality; none when all are alike."""
    distinct = sorted(set(qualities))
    if len(distinct) < 2:
        return {}
    top = MAX_NODE_SCORE / LINK_SCORE_SHARE
    return {quality: top * (index / (len(distinct) - 1)) * weight for index, quality in enumerate(distinct)}


def normalized_scores(counts: Floats, weight: int) -> Floats:
    """Volcano's reverse NormalizeScore over the candidates: fewer NUMA nodes scores higher, 0-100
    (integer arithmetic, as Volcano's), times weight; a count below 0 (no admission) scores 0 and
    does not take part."""
    # The ufunc's own reduce: ndarray.max with an initial value goes through a Python wrapper.
    highest = max(0, int(np.maximum.reduce(counts, initial=-1.0)))
    # Counts are small whole numbers (-1 .. NUMA nodes): the score of each is looked up.
    return _score_table(highest, weight)[counts.astype(np.intp) + 1]


@functools.lru_cache(maxsize=256)
def _score_table(highest: int, weight: int) -> Floats:
    """normalized_scores' score of NUMA count c at index c + 1 (index 0: no admission, 0)."""
    scores = [0.0] + [
        float((MAX_NODE_SCORE - (MAX_NODE_SCORE * count // highest if highest else 0)) * weight)
        for count in range(highest + 1)
    ]
    table = np.array(scores, dtype=np.float64)
    table.flags.writeable = False
    return table


def task_shape(task: TaskInfo) -> Hashable:
    """What numa-aware admission reads of a pod: QoS, and per container its name, kind and
    requests and limits. Two pods of one shape are admitted alike on a node in one state."""

    def amounts(resource: Resource) -> tuple[Any, ...]:
        return (resource.milli_cpu, resource.memory, tuple(sorted(resource.scalars.items())))

    return (
        task.qos,
        tuple((c.name, c.init, c.sidecar, amounts(c.requests), amounts(c.limits)) for c in task.containers),
        task.claims,
    )


def topology_fingerprint(topology: NumaTopology) -> Hashable:
    """Every field of the topology but the node's name (api.topology.topology_content_key): two
    nodes with equal fingerprints and equal free resources admit a pod alike, with the same ids.
    A node's fingerprint is built once per topology object (TopologyMemo)."""
    return topology_content_key(topology)


def free_key(free: FreeResources) -> Hashable:
    """FreeResources as a hashable value, equal exactly when the snapshots are equal."""
    return (
        free.cpus,
        tuple((resource, ids) for resource, ids in free.devices.items()),
        tuple((resource, tuple(per_numa.items())) for resource, per_numa in free.memory.items()),
        free.memory_groups,
        tuple(free.unknown.items()),
        tuple(free.unknown_pods.items()),
        None if free.dra is None else free.dra.key,
    )


def provider_arguments_of(arguments: Arguments) -> dict[str, Any]:
    """The arguments the provider factories see: the plugin's, with `devices` under the device
    provider's own name."""
    provider_arguments: dict[str, Any] = dict(arguments)
    if ARG_DEVICES in arguments:
        provider_arguments[ARG_DEVICE_RESOURCES] = arguments.get_list(ARG_DEVICES, [])
    return provider_arguments


def builtin_providers(provider_arguments: Mapping[str, Any]) -> list[HintProvider]:
    return [
        cpu_provider_factory(provider_arguments),
        device_provider_factory(provider_arguments),
        memory_provider_factory(provider_arguments),
        dra_provider_factory(provider_arguments),
    ]


class NumaAwarePlugin:
    def __init__(
        self,
        arguments: Arguments,
        providers: Sequence[HintProvider] | None = None,
        fingerprints: TopologyMemo[TopologyFingerprint] | None = None,
        tables: AdmissionTables | None = None,
    ) -> None:
        self.arguments = arguments
        self.weight = arguments.get_int(ARG_WEIGHT, 1)
        if self.weight < 0:
            raise arguments.invalid(ARG_WEIGHT, f"expected a non-negative integer, got {self.weight}")
        self.extra_provider_names = arguments.get_list(ARG_HINT_PROVIDERS, [])
        self.unknown_topology = unknown_topology_choice(arguments)
        self.provider_arguments = provider_arguments_of(arguments)
        self.providers: list[HintProvider] = (
            list(providers) if providers is not None else builtin_providers(self.provider_arguments)
        )
        self.fingerprints = fingerprints if fingerprints is not None else fingerprint_memo()
        # Node classes and what was computed for them; shared by the sessions of one set of
        # providers (NumaAwareBuilder), since the engine's memo keeps decisions across sessions.
        self.tables = tables if tables is not None else AdmissionTables()
        self._admissions = self.tables.admissions
        self._equivalent = self.tables.equivalent
        self._completed = self.tables.completed
        self._qualities = self.tables.qualities
        # The session whose per-pod CycleState holds what this plugin computed for the pod being
        # decided (its policy and shape, its admission per node); outside a session (a tool or a
        # test calling the plugin directly) the plugin keeps one such state itself.
        self._session: Session | None = None
        self._own_state = CycleState("")
        self._own_task: TaskInfo | None = None
        # The CycleState _pod last read and what it held there: read per node, many times per pod.
        self._pod_state: CycleState | None = None
        self._pod_data: _PodData | None = None
        # Per node: its NUMA occupancy (exclusivity) at a generation.
        self._occupancies: dict[str, tuple[int, NumaOccupancy]] = {}
        # Whether a plugin of the session restricts NUMA placement (restriction.py); None: not asked.
        self._restricting: bool | None = None

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    def on_session_open(self, ssn: Session) -> None:
        from numasched.scheduler.framework.session import EventHandler

        self.providers = self.providers[:BUILTIN_PROVIDER_COUNT] + self._extra_providers(ssn)
        self._session = ssn
        ssn.add_pre_predicate_fn(PLUGIN_NAME, self.pre_predicate)
        ssn.add_predicate_fn(PLUGIN_NAME, self.predicate)
        ssn.add_score_parts(
            PLUGIN_NAME,
            self.score_part,
            self.combine_scores,
            number=numa_count_of,
            combine_numbers=self.combine_numa_counts,
        )
        ssn.add_event_handler(EventHandler(allocate=self.on_allocate, deallocate=self.on_deallocate))

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        """Admission reads the pod's policy annotation and its shape (QoS, containers' requests and
        limits); reasons that name the pod are never shared by the engine."""
        # The tables' own token too: the engine keeps score parts per class, and a part holds ids
        # that only these tables read (its link quality's); other tables make other classes.
        return (self.tables.token, self._pod(task).key)

    def on_session_close(self, ssn: Session) -> None:
        self._session = None
        self._restricting = None
        self._own_state = CycleState("")
        self._own_task = None
        # The last pod's data holds its candidates, nodes of the session's snapshot.
        self._pod_state = self._pod_data = None
        self.tables.trim()

    def check_hint_providers(self, factories: Mapping[str, Callable[..., object]]) -> None:
        """Every provider `hint-providers` names exists and builds from these arguments (the
        configuration loader calls this, so a wrong name refuses the configuration)."""
        for provider_name in self.extra_provider_names:
            factory = factories.get(provider_name)
            if factory is None:
                known = ", ".join(sorted(factories)) or "none registered"
                raise PluginArgumentError(
                    PLUGIN_NAME, ARG_HINT_PROVIDERS, f"unknown hint provider {provider_name!r} (known: {known})"
                )
            build_extra_provider(provider_name, factory, self.provider_arguments)

    def _extra_providers(self, ssn: Session) -> list[HintProvider]:
        # Loaded configurations were checked by check_hint_providers; one built in code was not,
        # so a provider that still fails here is logged and left out rather than ending the session.
        extra: list[HintProvider] = []
        for provider_name in self.extra_provider_names:
            try:
                extra.append(
                    build_extra_provider(
                        provider_name, ssn.registry.hint_provider(provider_name), self.provider_arguments
                    )
                )
            except (LookupError, PluginArgumentError) as error:
                _log.error("hint provider is not used", plugin=PLUGIN_NAME, provider=provider_name, error=str(error))
        return extra

    def _cycle_state(self, task: TaskInfo) -> CycleState:
        if self._session is not None:
            return self._session.cycle_state(task)
        # Called directly, the plugin cannot tell two task objects of one uid apart by uid.
        if self._own_task is not task:
            self._own_task = task
            self._own_state = CycleState(task.uid)
        return self._own_state

    def _pod(self, task: TaskInfo) -> _PodData:
        """What admission reads of the pod, computed once per pod (its CycleState)."""
        # Asked several times per node: the session's state is read without a call in between.
        ssn = self._session
        state = ssn.cycle_state(task) if ssn is not None else self._cycle_state(task)
        if state is self._pod_state and self._pod_data is not None:
            return self._pod_data
        data: _PodData | None = state.get(_POD_KEY)
        if data is None:
            shape = task_shape(task)
            # The pod-level spec (pod_policy: ACK, Koordinator and Volcano annotations) reads the
            # annotations and the containers' limits (in the shape): pods alike share it.
            key = (tuple(task.annotations.get(name) for name in POD_POLICY_ANNOTATIONS), shape)
            read = self.tables.pod_specs.get(key)
            if read is None:
                try:
                    read = read_pod_spec(task)
                except PodPolicyError as error:
                    read = error
                self.tables.pod_specs[key] = read
            if isinstance(read, PodPolicyError):
                policy: TopologyPolicy | Status | None = Status(
                    StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, f"pod {task.key}: {read}", PLUGIN_NAME
                )
                spec = PodTopologySpec()
            else:
                policy, spec = read.policy, read
            plain = not isinstance(policy, Status) and not spec.cpuset and spec.exclusive is None
            data = _PodData(
                policy,
                shape,
                {},
                {},
                spec,
                key,
                plain=plain,
                requested=None if isinstance(policy, Status) else policy,
                linked=tuple(name for name, value in task.init_resreq.scalars.items() if value > 0),
            )
            state.write(_POD_KEY, data)
        self._pod_state, self._pod_data = state, data
        return data

    def pre_predicate(self, task: TaskInfo) -> Status:
        """A bad policy annotation rules out every node: say so once, not once per node."""
        requested = self._pod(task).policy
        return requested if isinstance(requested, Status) else SUCCESS

    # -- placement --------------------------------------------------------------------------------

    def _policy(self, task: TaskInfo, node: NodeInfo) -> TopologyPolicy | Status | None:
        """The policy to align the task with on this node; None when the node has no topology and
        the pod does not need one; a Status when the node is ruled out before any alignment."""
        return self._policy_of(task, self._pod(task), node)

    def _policy_of(self, task: TaskInfo, pod: _PodData, node: NodeInfo) -> TopologyPolicy | Status | None:
        requested = pod.policy
        if isinstance(requested, Status):
            return requested
        topology = node.topology
        spec = pod.spec
        if topology is None:
            if spec.cpuset:
                why = "rejected" if node.topology_error else "missing"
                return Status(
                    StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                    f"node(s) had no usable NUMA topology ({why}); pod asks for pinned CPUs",
                    PLUGIN_NAME,
                )
            return self._without_topology(task, node, requested)
        node_policy = topology.policies.topology_manager_policy
        if len(topology.numa_ids) > DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
            # Within the default every node passes (the option only raises the limit): read the
            # option only past it.
            limit = topology.policies.max_allowable_numa_nodes
            refusal = check_numa_node_limit(node_policy, len(topology.numa_ids), limit)
            if refusal is not None:
                return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, refusal, PLUGIN_NAME)
        if spec.cpuset or spec.exclusive is not None:
            who = enforcer(spec, task, topology.policies)
            if isinstance(who, str):
                return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, who, PLUGIN_NAME)
            return effective_policy(spec, node_policy, who)
        return stricter(node_policy, requested)

    def _spec(self, task: TaskInfo) -> PodTopologySpec:
        return self._pod(task).spec

    def _subject(self, task: TaskInfo, topology: NumaTopology) -> tuple[TaskInfo, NumaTopology]:
        """The pod and node as admission sees them: as they are, or, for a pod the agent pins
        (pod_policy.enforcer), the agent's view (the pod's pinned CPUs, the static CPU manager)."""
        return self._subject_of(task, self._pod(task).spec, topology)

    def _subject_of(
        self, task: TaskInfo, spec: PodTopologySpec, topology: NumaTopology
    ) -> tuple[TaskInfo, NumaTopology]:
        if not spec.cpuset or enforcer(spec, task, topology.policies) is not Enforcer.AGENT:
            return task, topology
        state = self._cycle_state(task)
        view: TaskInfo | None = state.get(_VIEW_KEY)
        if view is None:
            view = agent_task(task)
            state.write(_VIEW_KEY, view)
        return view, self.tables.agent_views.topology(topology, spec)

    def _without_topology(self, task: TaskInfo, node: NodeInfo, requested: TopologyPolicy | None) -> Status | None:
        """A node whose topology is missing or was rejected: a pod that asks for a policy cannot
        be aligned there; one the kubelet would pin goes there only under unknown-topology: allow."""
        # The reason names the case, not the node nor the rejection's detail (that names the
        # object; it is reported on the object and by `simulate`), so equal nodes group.
        why = "rejected" if node.topology_error else "missing"
        if requested is not None and requested is not TopologyPolicy.NONE:
            return Status(
                StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"node(s) had no usable NUMA topology ({why}); pod asks for {requested.value}",
                PLUGIN_NAME,
            )
        if self.unknown_topology is UnknownTopology.ALLOW:
            return None
        needs = self._pinned_needs(task)
        if not needs:
            return None
        return Status(
            StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"node(s) had no usable NUMA topology ({why}); pod needs {needs}, which "
            f"{ARG_UNKNOWN_TOPOLOGY}: {self.unknown_topology.value} keeps off such nodes",
            PLUGIN_NAME,
        )

    def _pinned_needs(self, task: TaskInfo) -> str:
        state = self._cycle_state(task)
        cached: str | None = state.get(_NEEDS_KEY)
        if cached is None:
            cached = pinned_needs(task, self._device_resources())
            state.write(_NEEDS_KEY, cached)
        return cached

    def _device_resources(self) -> frozenset[str]:
        resources: frozenset[str] = frozenset()
        for provider in self.providers:
            if isinstance(provider, DeviceProvider):
                resources = resources | provider.resources
        return resources

    def place(self, task: TaskInfo, node: NodeInfo) -> Placement | Status:
        """The full placement on this node (every id chosen), or the status that rules it out."""
        policy = self._policy(task, node)
        if policy is None:
            return Placement(True)
        if isinstance(policy, Status):
            return policy
        assert node.topology is not None
        subject, topology = self._subject(task, node.topology)
        free = free_resources(node)
        placement = place_pod(subject, topology, free, self.providers, policy)
        if not placement.admitted:
            return Status.unschedulable(placement.reason, PLUGIN_NAME)
        ruled = self._exclusive(task, subject, node, topology, free, policy, placement)
        # Given a Placement, _exclusive answers with a Placement (this one or another) or a Status.
        assert not isinstance(ruled, Admission)
        if isinstance(ruled, Placement):
            apart = self._apart_from_group(task, subject, node, topology, free, policy, ruled)
            if apart is not None:
                return apart
        return ruled

    def admit(self, task: TaskInfo, node: NodeInfo) -> Placement | Admission | Status:
        """Whether the task fits this node and how many NUMA nodes it spans there, choosing the ids
        only where that decides it (admission.admit_pod); kept for scoring and on_allocate."""
        return self._admit(task, self._pod(task), node)

    def _admit(self, task: TaskInfo, pod: _PodData, node: NodeInfo) -> Placement | Admission | Status:
        # admit, given the pod's data (its callers per node have it already).
        topology = node.topology
        policy: TopologyPolicy | Status | None
        if pod.plain and topology is not None and len(topology.numa_ids) <= DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
            # Most pods on most nodes (asked per node, so without _policy_of and _subject_of): no
            # pinned CPUs, no exclusivity, a machine within the kubelet's NUMA limit; the policy
            # is the stricter of the node's and the pod's, and admission sees the pod as it is.
            policy = stricter(topology.policies.topology_manager_policy, pod.requested)
            subject = task
        else:
            policy = self._policy_of(task, pod, node)
            if policy is None:
                return Placement(True)
            if isinstance(policy, Status):
                return policy
            assert topology is not None
            subject, topology = self._subject_of(task, pod.spec, topology)
        # Admission depends only on the node's topology content and what is pinned there
        # (numa_usage) and on the pod's shape: pods of one shape (the replicas of a job) reuse the
        # node's state while the node is as it was, and nodes alike share their class.
        state = self._admissions.get(node.name)
        if state is None or state.topology is not topology or state.generation != node.numa_generation:
            state = self._next_node_state(node, topology, state)
        shape = pod.shape_ids.get(policy)
        if shape is None:
            # The pod's shape under this policy, as a small id: it is hashed per node from here on.
            shape = pod.shape_ids[policy] = self.tables.shape_id((policy, pod.shape))
        outcome = state.outcomes.get(shape)
        if outcome is None:
            # The answer for a node alike (same class), where one was kept for this pod's shape
            # (or, naming the pod, for this pod): most nodes a pod is asked about are answered so.
            shared = self._equivalent.get((state.class_id, shape))
            if shared is not None and (shared.pod is None or shared.pod == subject.key):
                kept = shared.outcome
                outcome = Status.unschedulable(kept, PLUGIN_NAME) if isinstance(kept, str) else kept
                if shared.pod is None:
                    state.outcomes[shape] = outcome
            else:
                # The unit plan is kept per pod shape and machine content, but not for an agent's
                # view of the pod (another task object per node, not of the pod's shape).
                outcome = self._computed_outcome(subject, pod, node, topology, state, shape, policy, subject is task)
        if isinstance(outcome, Status):
            return outcome
        if pod.spec.exclusive is not None:
            outcome = self._exclusive(task, subject, node, topology, state.free, policy, outcome)
            if isinstance(outcome, Status):
                return outcome
        if self._restricting is not False:
            # Once known that no plugin of the session restricts placement, not asked per node.
            apart = self._apart_from_group(task, subject, node, topology, state.free, policy, outcome)
            if apart is not None:
                return apart
        pod.decided[node.name] = _Decision(
            outcome,
            state.free,
            topology,
            policy,
            (state.class_id, shape),
            node.generation,
            outcome.numa.count(),
            state.generation,
        )
        return outcome

    # -- NUMA restrictions (restriction.py): another plugin (numa-affinity-group) admits the node
    # only if the pod's placement there keeps it with its group. Checked, never steered.

    def _apart_from_group(
        self,
        task: TaskInfo,
        subject: TaskInfo,
        node: NodeInfo,
        topology: NumaTopology,
        free: FreeResources,
        policy: TopologyPolicy,
        outcome: Placement | Admission,
    ) -> Status | None:
        """Why this outcome would take the pod away from its group; None when it keeps it there
        or nothing restricts the pod."""
        restriction = self._restriction(task, node)
        if restriction is None:
            return None
        allocation = outcome.allocation if isinstance(outcome, Placement) else None
        if isinstance(outcome, Admission) and restriction.companions:
            allocation = allocate_admitted(subject, outcome, topology, free, self.providers, policy).allocation
        node_policy = topology.policies.topology_manager_policy

        def place(companion: TaskInfo, pool: FreeResources) -> Placement:
            try:
                companion_policy = stricter(node_policy, pod_policy(companion))
            except PolicyError as error:
                return Placement(False, f"pod {companion.key}: annotation {POLICY_ANNOTATION}: {error}")
            return place_pod(companion, topology, pool, self.providers, companion_policy)

        why = keeps_group(outcome.numa, allocation, restriction, free, place)
        return Status.unschedulable(why, PLUGIN_NAME) if why else None

    def _restriction(self, task: TaskInfo, node: NodeInfo) -> NumaRestriction | None:
        ssn = self._session
        if ssn is None:
            return None
        if self._restricting is None:
            # Asked once the session's plugins are all open (actions run after every open).
            self._restricting = any_restricting(ssn)
        if not self._restricting:
            return None
        state = self._cycle_state(task)
        restrict = state.get(_RESTRICTION_KEY, _UNASKED_RESTRICTION)
        if restrict is _UNASKED_RESTRICTION:
            restrict = restriction_of(ssn, task)
            state.write(_RESTRICTION_KEY, restrict)
        return None if restrict is None else restrict(node)

    def _next_node_state(self, node: NodeInfo, topology: NumaTopology, state: _NodeState | None) -> _NodeState:
        """The node's state as admission reads it, where `state` (its last one, if any) no longer
        holds: derived from it when one allocation joined the ledger since, else read anew."""
        if state is not None and state.topology is topology:
            step = node.numa_step
            if step is not None and step.before == state.generation and step.after == node.numa_generation:
                # One allocation joined the ledger since (a pod placed here): the state follows
                # from the one before, as on every node of its class given the same allocation.
                return self._successor(node, state, step.added)
        free = free_resources(node)
        fingerprint = self.fingerprints.get(topology)
        class_id = self.tables.class_id(fingerprint, free_key(free))
        state = _NodeState(node.numa_generation, topology, fingerprint, free, class_id)
        self._admissions[node.name] = state
        return state

    def _successor(self, node: NodeInfo, before: _NodeState, added: PodAllocation) -> _NodeState:
        """The node's state once `added` joined its ledger, from its state before: kept per (class
        before, allocation object), since a class names the free resources exactly and one
        allocation object (a completed admission) is placed on many nodes of a class."""
        key = (before.class_id, id(added))
        known = self.tables.successors.get(key)
        if known is not None and known[0] is added:
            free, class_id = known[1], known[2]
        else:
            derived = free_after(before.free, added)
            free = derived if derived is not None else free_resources(node)
            class_id = self.tables.class_id(before.fingerprint, free_key(free))
            if derived is not None:
                # The allocation is kept with its entry, so its id names it for as long as the entry lives.
                self.tables.successors[key] = (added, free, class_id)
        state = _NodeState(node.numa_generation, before.topology, before.fingerprint, free, class_id)
        self._admissions[node.name] = state
        return state

    def _computed_outcome(
        self,
        task: TaskInfo,
        pod: _PodData,
        node: NodeInfo,
        topology: NumaTopology,
        state: _NodeState,
        shape: int,
        policy: TopologyPolicy,
        keep_plan: bool = False,
    ) -> Placement | Admission | Status:
        """The admission of a node state whose class has no answer kept for the shape, computed
        and kept for nodes alike. A refusal is shared as its reason without the "node <name>: "
        prefix, and only when that reason names neither this node nor (unless it is the same pod)
        the pod; everything else is kept to this node."""
        key = (state.class_id, shape)
        unit: DecisionUnit | Unasked | None = UNASKED
        if keep_plan and policy is not TopologyPolicy.NONE:
            plan_key = (shape, state.fingerprint)
            plan = self.tables.unit_plans.get(plan_key, UNASKED)
            if isinstance(plan, Unasked):
                scope = topology.policies.topology_manager_scope
                plan = self.tables.unit_plans[plan_key] = unit_plan(task, topology, self.providers, scope)
            if plan is None:
                unit = None
            else:
                # The pod's request under a plan is the same on every node of that plan.
                units = pod.units
                unit = units.get(plan_key)
                if unit is None:
                    unit = units[plan_key] = plan.unit(task)
        placed = admit_pod(task, topology, state.free, self.providers, policy, merges=self.tables.merges, unit=unit)
        if isinstance(placed, Placement) and not placed.admitted:
            reason = placed.reason
            names_pod = task.key in reason
            if node.name not in reason and topology.node_name not in reason:
                self._equivalent[key] = _Shared(reason, task.key if names_pod else None)
            refusal = Status.unschedulable(reason, PLUGIN_NAME)
            if not names_pod:
                state.outcomes[shape] = refusal
            return refusal
        self._equivalent[key] = _Shared(placed, None)
        state.outcomes[shape] = placed
        return placed

    def _occupancy(self, node: NodeInfo, topology: NumaTopology) -> NumaOccupancy:
        """Which NUMA nodes of the node hold single-NUMA and spanning pods (exclusivity), from
        its tasks' decisions; kept per node generation for this session."""
        known = self._occupancies.get(node.name)
        if known is not None and known[0] == node.generation:
            return known[1]
        found = occupancy((t.allocation for t in node.tasks.values() if t.allocation is not None), topology)
        self._occupancies[node.name] = (node.generation, found)
        return found

    def _exclusive(
        self,
        task: TaskInfo,
        subject: TaskInfo,
        node: NodeInfo,
        topology: NumaTopology,
        free: FreeResources,
        policy: TopologyPolicy,
        outcome: Placement | Admission,
    ) -> Placement | Admission | Status:
        """singleNUMANodeExclusive (exclusivity.py): the outcome when it keeps the rule; else, for a
        pod the agent pins, a placement on NUMA nodes that keep it; else Required refuses the node
        and Preferred keeps the outcome (the score ranks it lower)."""
        exclusive = self._spec(task).exclusive
        if exclusive is None or policy not in EXCLUSIVE_POLICIES or not outcome.numa.count():
            return outcome
        state = self._occupancy(node, topology)
        broken = conflict(outcome.numa, state)
        if not broken:
            return outcome
        if subject is not task:
            for avoid in avoid_sets(state):
                placed = place_pod(subject, topology, without_numa(free, avoid, topology), self.providers, policy)
                if placed.admitted and placed.numa.count() and not conflict(placed.numa, state):
                    return placed
        if exclusive is Exclusivity.PREFERRED:
            return outcome
        return Status.unschedulable(describe_conflict(outcome.numa, broken, exclusive), PLUGIN_NAME)

    def _preferred_penalty_array(self, candidates: Candidates, parts: CandidateParts, scores: Floats) -> None:
        """singleNUMANodeExclusive Preferred: a candidate whose placement breaks the rule loses the
        NUMA score's whole range, so it ranks below every candidate that keeps it. For a pod whose
        spec asks for it (the caller checks)."""
        for position, (node, part) in enumerate(zip(candidates, parts.tolist(), strict=True)):
            if isinstance(part, _ScorePart) and self._breaks_rule(node, part.decision):
                scores[position] -= MAX_NODE_SCORE * self.weight

    def _breaks_rule(self, node: NodeInfo, decision: _Decision) -> bool:
        if node.topology is None or decision.policy not in EXCLUSIVE_POLICIES:
            return False
        return bool(conflict(decision.outcome.numa, self._occupancy(node, decision.topology)))

    def _remember(self, task: TaskInfo, node_name: str, decision: _Decision) -> None:
        # Kept in the pod's CycleState: its nodes' decisions serve its scoring and its allocation.
        self._pod(task).decided[node_name] = decision

    def _scored_decision(self, task: TaskInfo, node: NodeInfo) -> _Decision | None:
        """The decision in the score part of the chosen node, when the candidates were scored on
        arrays (combine_numa_counts keeps the parts, not a decision per candidate)."""
        scored = self._pod(task).scored
        if not scored:
            return None
        candidates, parts = scored[0]
        position = candidates.index_of(node)
        if position is None:
            return None
        part = parts[position]
        return part.decision if isinstance(part, _ScorePart) else None

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        pod = self._pod(task)
        outcome = self._admit(task, pod, node)
        if isinstance(outcome, Status):
            pod.decided.pop(node.name, None)
            return outcome
        return SUCCESS

    def batch_node_order(self, task: TaskInfo, nodes: Sequence[NodeInfo]) -> dict[str, float]:
        """The scores of these candidate nodes (score_part per node, then combine_scores)."""
        return self.combine_scores(task, nodes, {node.name: self.score_part(task, node) for node in nodes})

    def score_part(self, task: TaskInfo, node: NodeInfo) -> _ScorePart | None:
        """What the score needs of one node: the task's admission there (None: the node has no
        topology or does not admit it). The engine memoises it per pod class and generation."""
        if node.topology is None:
            return None
        pod = self._pod(task)
        decision = pod.decided.get(node.name)
        if decision is None:
            self._admit(task, pod, node)
            decision = pod.decided.get(node.name)
        return None if decision is None else _ScorePart(decision)

    def combine_scores(
        self, task: TaskInfo, nodes: Sequence[NodeInfo], parts: Mapping[str, object]
    ) -> dict[str, float]:
        """combine_numa_counts for parts by node name (the engine's dict form): the scores of the
        nodes that admit the task."""
        candidates = Candidates(nodes)
        in_order: Objects = np.empty(len(nodes), dtype=object)
        for position, node in enumerate(nodes):
            in_order[position] = parts.get(node.name)
        counts: Floats = np.fromiter((numa_count_of(part) for part in in_order), dtype=np.float64, count=len(nodes))
        scores = self.combine_numa_counts(task, candidates, CandidateParts(in_order), counts)
        return {node.name: float(scores[position]) for position, node in enumerate(nodes) if counts[position] >= 0}

    def combine_numa_counts(
        self, task: TaskInfo, candidates: Candidates, parts: CandidateParts, counts: Floats
    ) -> Floats:
        """combine_scores on arrays: the candidates' NUMA counts (numa_count_of their parts; -1
        where the node has no admission) give the scores in the candidates' order."""
        pod = self._pod(task)
        pod.decided.clear()
        pod.scored[:] = [(candidates, parts)]
        scores = normalized_scores(counts, self.weight)
        if pod.spec.exclusive is Exclusivity.PREFERRED:
            self._preferred_penalty_array(candidates, parts, scores)
        linked = pod.linked
        if not linked:
            return scores
        scored = counts >= 0
        if not scored.any():
            return scores
        best = float(scores[scored].max())
        reach = MAX_NODE_SCORE / LINK_SCORE_SHARE * self.weight
        near = np.flatnonzero(scored & (scores >= best - reach))
        # Every near-best candidate admits the task, so its part is a _ScorePart.
        near_parts = cast(list[_ScorePart], parts.at(near))
        # Qualities by their id in the tables (0: no links reported, -1: not ranked yet), so the
        # ranking is array work; most parts were ranked for an earlier pod of the class.
        ids: Ints = np.fromiter(map(_quality_id_of, near_parts), dtype=np.int64, count=len(near_parts))
        for offset in np.flatnonzero(ids < 0).tolist():
            part = near_parts[offset]
            quality = self._link_quality(task, candidates[int(near[offset])], part, linked)
            # Kept in the part, which the engine keeps per pod class and node generation.
            part.quality_id = ids[offset] = self.tables.quality_id(quality)
        present = np.flatnonzero(np.bincount(ids)).tolist()
        known = self.tables.qualities_by_id
        distinct = [quality for quality in map(known.__getitem__, present) if quality is not None]
        ranked = link_bonuses(distinct, self.weight)
        if ranked:
            bonuses = np.zeros(present[-1] + 1, dtype=np.float64)
            for quality_id in present:
                quality = known[quality_id]
                # No links reported (None) ranks nowhere: no bonus.
                bonuses[quality_id] = 0.0 if quality is None else ranked[quality]
            scores[near] += bonuses[ids]
        return scores

    def _link_quality(
        self, task: TaskInfo, node: NodeInfo, part: _ScorePart, linked: Sequence[str]
    ) -> tuple[int, int, int] | None:
        """The node's device-set quality for link ranking; None where the node reports no links."""
        topology = node.topology
        if topology is None or not topology.links:
            return None
        resources = tuple(filter(topology.devices.__contains__, linked))
        return self._set_quality(task, node, part.decision, resources) if resources else None

    def _set_quality(
        self, task: TaskInfo, node: NodeInfo, decision: _Decision, resources: tuple[str, ...]
    ) -> tuple[int, int, int] | None:
        """Link quality of the device sets this node would give the task (device_sets.set_quality,
        summed over its device resources); the full placement is kept for on_allocate."""
        topology = node.topology
        if topology is None:
            return None
        # The ids chosen, and so their quality, are the same on every node of the class.
        memo_key = (*decision.equivalence, resources)
        if memo_key in self._qualities and decision.generation == node.generation:
            return self._qualities[memo_key]
        # Both memos hold for the node as the decision saw it; a node changed since is placed anew.
        current = decision.generation == node.generation
        device_key = self._device_state(decision, resources) if current else None
        if device_key is not None and device_key in self.tables.device_qualities:
            return self.tables.device_qualities[device_key]
        quality = self._computed_quality(task, node, topology, decision, resources)
        if current:
            self._qualities[memo_key] = quality
            if device_key is not None:
                self.tables.device_qualities[device_key] = quality
        return quality

    def _device_state(self, decision: _Decision, resources: tuple[str, ...]) -> tuple[int, int, TopologyHint] | None:
        """What the device sets an Admission is completed with depend on: the devices (the
        topology), the pod's shape and policy, the merged hint, and per device resource what is
        free and how much pods of unknown ids hold; not the CPUs (the device provider reads none).
        None for a full Placement, whose ids are already chosen."""
        outcome = decision.outcome
        if not isinstance(outcome, Admission):
            return None
        class_id, shape = decision.equivalence
        # The devices and their free and unknown counts follow from the node's class (its topology
        # content and free resources): named by a small id, read once per class.
        tables = self.tables
        state_id = tables.device_states.get((class_id, resources))
        if state_id is None:
            free = decision.free
            content = (
                self.fingerprints.get(decision.topology),
                resources,
                tuple(free.free_devices(resource) for resource in resources),
                tuple(free.unknown_count(resource) for resource in resources),
            )
            state_id = tables.device_state_id((class_id, resources), content)
        return (state_id, shape, outcome.hint)

    def _computed_quality(
        self, task: TaskInfo, node: NodeInfo, topology: NumaTopology, decision: _Decision, resources: Sequence[str]
    ) -> tuple[int, int, int] | None:
        outcome = decision.outcome
        if not isinstance(outcome, Placement):
            completed = self._allocation(task, node, decision)
            if isinstance(completed, Status):
                return None
            outcome = completed
            self._remember(task, node.name, attrs.evolve(decision, outcome=completed))
        if outcome.allocation is None:
            return None
        total: tuple[int, int, int] = (0, 0, 0)
        for resource in resources:
            quality = set_quality(resource, outcome.allocation.devices(resource), topology, node.free_devices(resource))
            total = (
                total[0] + quality.nvlinks,
                total[1] + quality.pcie_closeness,
                total[2] + quality.largest_block_left,
            )
        return total

    # -- events -----------------------------------------------------------------------------------

    def on_allocate(self, event: Event) -> None:
        """Decide the task's CPUs, devices and memory on its node. The statement then accounts
        task.allocation in the node's NUMA ledger, so later pods of this session see it."""
        task, node = event.task, event.node
        # Taken out of the pod's decisions: only the current task's are kept, one per node.
        decision = self._pod(task).decided.pop(node.name, None) or self._scored_decision(task, node)
        if node.topology is None:
            return
        task.allocation = None
        if task.status is TaskStatus.PIPELINED:
            # It waits for pods being released (evicted victims) whose CPUs and devices are still
            # held: nothing can be chosen yet. It is decided like any pod once they are gone.
            return
        outcome = self._allocation(task, node, decision)
        if isinstance(outcome, Status):
            # The predicate passed on this node earlier in the session; it no longer does, which
            # only a plugin allocating outside the predicates could cause.
            _log.error(
                "task allocated where its topology no longer fits",
                pod=task.key,
                node=node.name,
                reason=outcome.reason,
            )
            return
        task.allocation = outcome.allocation
        if task.allocation is not None and self._spec(task).static_burst:
            subject, topology = self._subject(task, node.topology)
            if subject is not task:
                # static-burst: whole L3 groups where free (the pod's own CPUs are not yet held).
                task.allocation = burst_allocation(task.allocation, topology, node.free_cpus())
        if task.allocation is not None:
            self._leave_out_unknown_ids(task, node)

    def _leave_out_unknown_ids(self, task: TaskInfo, node: NodeInfo) -> None:
        """Where pods of unknown ids hold a resource, the ids chosen for it are only a stand-in
        for the kubelet's choice: the binding names the NUMA nodes and not the ids, and the pod
        joins the unknown holders so later pods of this session see it as one."""
        assert task.allocation is not None
        if not node.unknown_holders:
            # Most nodes: every id is known, nothing to leave out.
            return
        unknown = frozenset(resource for resource, (count, _) in node.unknown_holdings().items() if count > 0)
        allocation, left_out = without_unknown_ids(task.allocation, unknown)
        if not left_out:
            return
        task.allocation = allocation
        node.set_unknown_holder(task.uid, UnknownHolder(task.key, left_out))

    def _allocation(self, task: TaskInfo, node: NodeInfo, decision: _Decision | None) -> Placement | Status:
        """The predicate's decision completed when the node is as the predicate saw it, else a
        fresh full placement."""
        subject, topology = (task, None) if node.topology is None else self._subject(task, node.topology)
        # The policy is not asked again: it follows from the pod's class (its annotations and
        # shape) and the topology object, which are the decision's.
        if decision is None or decision.topology is not topology:
            return self.place(task, node)
        free = decision.free
        # At the decision's NUMA generation what is free is as the decision saw it (on_allocate
        # runs once the node holds the task, which holds no ids yet); after that, the free
        # resources tell.
        if decision.numa_generation != node.numa_generation:
            free = free_resources(node)
            if free != decision.free:
                return self.place(task, node)
        if isinstance(decision.outcome, Placement):
            return decision.outcome
        assert topology is not None
        # Allocations are topology-relative: a node alike, as free, gets the same ids.
        completed = self._completed.get(decision.equivalence)
        if completed is not None:
            return completed
        placement = allocate_admitted(subject, decision.outcome, topology, free, self.providers, decision.policy)
        if not placement.admitted:
            return Status.unschedulable(placement.reason, PLUGIN_NAME)
        self._completed[decision.equivalence] = placement
        return placement

    def on_deallocate(self, event: Event) -> None:
        # The statement removes the allocation from the node's ledger and clears it on roll back;
        # an evicted (releasing) task keeps holding its CPUs and devices until it is gone.
        self._forget_node(event.task, event.node.name)

    def _forget_node(self, task: TaskInfo, node_name: str) -> None:
        # Only the current task's decisions are kept, one per node.
        self._pod(task).decided.pop(node_name, None)


class AdmissionTables:
    """Node classes (nodes of equal topology content and equal free resources) and what was
    computed for them: the admission of a pod shape, the ids chosen, the link quality; and each
    node's state at its last generation. Valid for as long as the providers are the same, so one
    instance serves every session of one configuration.

    Class ids are never reused: trimming forgets classes (a class seen again gets a new id), it
    never lets two contents share an id, so a decision kept elsewhere (the engine's memo) can
    never be read under another class's id."""

    # Past this many classes, or nodes, the tables start over (ids keep counting).
    MAX_CLASSES = 200_000
    MAX_NODES = 50_000

    def __init__(self) -> None:
        # Names these tables in the pod classes numa-aware declares (equivalence_key).
        self.token = object()
        self._ids: dict[tuple[int, Hashable], int] = {}
        self._shape_ids: dict[Hashable, int] = {}
        self._fingerprint_ids: dict[TopologyFingerprint, int] = {}
        self._next_id = 0
        self.admissions: dict[str, _NodeState] = {}
        self.equivalent: dict[tuple[int, int], _Shared] = {}
        # The ids chosen for an Admission, per class and shape: valid on any node of the class.
        self.completed: dict[tuple[int, int], Placement] = {}
        # Link quality of the device sets chosen per class, shape and device resources.
        self.qualities: dict[tuple[int, int, tuple[str, ...]], tuple[int, int, int] | None] = {}
        # A class's successor once an allocation is added (the allocation object, the free
        # resources and class after): NumaAwarePlugin._successor.
        self.successors: dict[tuple[int, int], tuple[PodAllocation, FreeResources, int]] = {}
        # Which request decides a pod shape on a machine content (admission.unit_plan).
        self.unit_plans: dict[tuple[int, TopologyFingerprint], UnitPlan | None] = {}
        # The same per device state (_device_state): nodes alike but for their CPUs share it.
        self.device_qualities: dict[Hashable, tuple[int, int, int] | None] = {}
        # A device state's id per (class, device resources), and per content (device_state_id).
        self.device_states: dict[tuple[int, tuple[str, ...]], int] = {}
        self._device_state_ids: dict[Hashable, int] = {}
        # Link qualities by a small id (0: none reported), for ranking on arrays. Never trimmed:
        # score parts in the engine's memo hold ids, and the qualities are sums of small counts
        # (NVLinks, PCIe closeness, a free block's size), so there are few of them.
        self.qualities_by_id: list[tuple[int, int, int] | None] = [None]
        self._quality_ids: dict[tuple[int, int, int] | None, int] = {None: 0}
        # The agent's view of each node topology, for pods the agent pins (pod_policy).
        self.agent_views = AgentViews()
        # read_pod_spec's answer (or its error) by the annotations it reads and the pod's shape.
        self.pod_specs: dict[Hashable, PodTopologySpec | PodPolicyError] = {}
        # Merged hints by policy, NUMA ids and providers' hints (admission._merge).
        self.merges = MergeMemo()

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def class_id(self, fingerprint: TopologyFingerprint, free: Hashable) -> int:
        topology_id = self._fingerprint_ids.get(fingerprint)
        if topology_id is None:
            topology_id = self._fingerprint_ids[fingerprint] = self._new_id()
        key = (topology_id, free)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._new_id()
        return found

    def device_state_id(self, key: tuple[int, tuple[str, ...]], content: Hashable) -> int:
        """The id of a device state's content (never reused: ids are counted on), kept for the
        class and resources `key`."""
        found = self._device_state_ids.get(content)
        if found is None:
            found = self._device_state_ids[content] = self._new_id()
        self.device_states[key] = found
        return found

    def quality_id(self, quality: tuple[int, int, int] | None) -> int:
        found = self._quality_ids.get(quality)
        if found is None:
            found = self._quality_ids[quality] = len(self.qualities_by_id)
            self.qualities_by_id.append(quality)
        return found

    def shape_id(self, shape: Hashable) -> int:
        found = self._shape_ids.get(shape)
        if found is None:
            found = self._shape_ids[shape] = self._new_id()
        return found

    def trim(self) -> None:
        if len(self._ids) + len(self._shape_ids) > self.MAX_CLASSES or len(self._fingerprint_ids) > self.MAX_CLASSES:
            self._ids.clear()
            self._shape_ids.clear()
            self._fingerprint_ids.clear()
            self.equivalent.clear()
            self.completed.clear()
            self.unit_plans.clear()
            self.successors.clear()
            self.qualities.clear()
            self.device_qualities.clear()
            self.device_states.clear()
            self._device_state_ids.clear()
        if len(self.successors) > self.MAX_CLASSES:
            self.successors.clear()
        if len(self.admissions) > self.MAX_NODES:
            self.admissions.clear()
        if len(self.device_qualities) > self.MAX_CLASSES:
            self.device_qualities.clear()
        if len(self.device_states) + len(self._device_state_ids) > self.MAX_CLASSES:
            # A content seen again gets a new id; qualities kept under the old one go unread.
            self.device_states.clear()
            self._device_state_ids.clear()
        if len(self.pod_specs) > self.MAX_CLASSES:
            self.pod_specs.clear()


class TopologyFingerprint:
    """A topology's content but its node name (topology_fingerprint), hashed once: it is built
    once per topology object (TopologyMemo) and then only compared."""

    __slots__ = ("__weakref__", "_hash", "content")

    def __init__(self, content: Hashable) -> None:
        self.content = content
        self._hash = hash(content)

    @classmethod
    def of(cls, topology: NumaTopology) -> TopologyFingerprint:
        """The machine part hashed once on its own (nodes of one shape can share it, see
        fingerprint_memo), beside the availability."""
        return cls((cls(topology_shape_key(topology)), topology_availability_key(topology)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopologyFingerprint):
            return NotImplemented
        return self is other or (self._hash == other._hash and self.content == other.content)


def fingerprint_memo() -> TopologyMemo[TopologyFingerprint]:
    """Each topology object's fingerprint (TopologyFingerprint.of), one object per content: nodes
    alike then hold the same fingerprint, so AdmissionTables finds a node's class by identity
    instead of walking the content (tens of microseconds per comparison on a large machine); and
    fingerprints of one machine shape share its part, so the tables keep only each availability
    apart, not another copy of the machine per update of a node's topology object."""
    shapes: ContentMemo[TopologyFingerprint] = ContentMemo()
    canonical: ContentMemo[TopologyFingerprint] = ContentMemo()

    # Keyed by the content, not by a fingerprint: a key is held strongly, and a fingerprint must
    # be free to go when no table and no topology uses it.
    def fingerprint_of(topology: NumaTopology) -> TopologyFingerprint:
        shape_key = topology_shape_key(topology)
        shape = shapes.get(shape_key, lambda: TopologyFingerprint(shape_key))
        content = (shape, topology_availability_key(topology))
        return canonical.get(content, lambda: TopologyFingerprint(content))

    return TopologyMemo(fingerprint_of)


@attrs.define(slots=True)
class _NodeState:
    """A node as admission reads it, at one NUMA generation (NodeInfo.numa_generation)."""

    generation: int
    topology: NumaTopology
    # The topology's content (fingerprints.get(topology)), read once per node state.
    fingerprint: TopologyFingerprint
    free: FreeResources
    # Nodes of equal topology content and free resources share a class within the session.
    class_id: int
    outcomes: dict[int, Placement | Admission | Status] = attrs.field(factory=dict)


# Not frozen (a frozen __init__ costs more): one is built per admission computed, never changed.
@attrs.define(slots=True, eq=False)
class _Shared:
    """An admission shared by the nodes of one class: the outcome, or a refusal's reason without
    its node prefix; pod is the pod key the reason names, None when it names none."""

    outcome: Placement | Admission | str
    pod: str | None


# Not frozen: one is built per node a pod is admitted on, and attrs' frozen __init__ costs three
# times as much. Nothing changes one once built (attrs.evolve makes another).
@attrs.define(slots=True, eq=False)
class _Decision:
    """A task's admission on a node and what it was decided from."""

    outcome: Placement | Admission
    free: FreeResources
    topology: NumaTopology
    policy: TopologyPolicy
    # The node's equivalence class and the pod's shape (with the policy) it was decided for.
    equivalence: tuple[int, int]
    # The node's generation when it was decided.
    generation: int
    # How many NUMA nodes the outcome spans.
    numa_count: int
    # The node's numa_generation when it was decided (free holds while it does).
    numa_generation: int


_quality_id_of = operator.attrgetter("quality_id")


def numa_count_of(part: object) -> float:
    """The number combine_numa_counts reads of a score part: the NUMA nodes the admission spans,
    -1 where the node has no admission."""
    return float(part.decision.numa_count) if isinstance(part, _ScorePart) else -1.0


class _ScorePart:
    """numa-aware's score part for one node (memoised by the engine per pod class and node
    generation): the admission, and the link quality of its device set once computed."""

    __slots__ = ("decision", "quality_id")

    def __init__(self, decision: _Decision) -> None:
        self.decision = decision
        # AdmissionTables.quality_id of its link quality; -1 until ranked.
        self.quality_id = -1


# CycleState keys of this plugin.
_POD_KEY = "numa-aware/pod"
_NEEDS_KEY = "numa-aware/pinned-needs"
_VIEW_KEY = "numa-aware/agent-view"
# The pod's NUMA restriction per node (restriction.py), asked once per pod.
_RESTRICTION_KEY = "numa-aware/restriction"
_UNASKED_RESTRICTION = object()


@attrs.frozen(slots=True)
class _PodData:
    """What numa-aware reads of the pod being decided, once per pod, and its admission per node."""

    # The policy it asks for (None: none), or why its annotation rules out every node.
    policy: TopologyPolicy | Status | None
    shape: Hashable
    decided: dict[str, _Decision]
    # Per policy it is admitted under, the id of (policy, shape) in AdmissionTables.
    shape_ids: dict[TopologyPolicy, int]
    # The pod-level spec (pod_policy: ACK, Koordinator and Volcano annotations).
    spec: PodTopologySpec
    # What admission reads of the pod: its policy annotations and its shape (equivalence_key).
    key: Hashable
    # The candidates last scored and their score parts (combine_numbers): the decisions on them.
    scored: list[tuple[Candidates, CandidateParts]] = attrs.field(factory=list)
    # True when admission on a node depends only on the node's policy and `requested` (the
    # policy the pod asks for): no bad annotation, no pinned CPUs, no exclusivity.
    plain: bool = False
    requested: TopologyPolicy | None = None
    # The extended resources it asks for (link ranking ranks the device sets of those).
    linked: tuple[str, ...] = ()
    # Its decision unit per unit plan (keyed as AdmissionTables.unit_plans).
    units: dict[Hashable, DecisionUnit] = attrs.field(factory=dict)


def build(arguments: Arguments) -> NumaAwarePlugin:
    return NumaAwarePlugin(arguments)


def build_extra_provider(
    name: str, factory: Callable[..., object], provider_arguments: Mapping[str, Any]
) -> HintProvider:
    """A third-party provider from its entry-point factory; PluginArgumentError (argument
    `hint-providers`) says why it cannot be built."""
    try:
        provider = factory(provider_arguments)
    except PluginArgumentError:
        raise
    except Exception as error:  # a third-party factory may raise anything
        raise PluginArgumentError(
            PLUGIN_NAME, ARG_HINT_PROVIDERS, f"hint provider {name!r} cannot be built: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(provider, HintProvider):
        raise PluginArgumentError(
            PLUGIN_NAME, ARG_HINT_PROVIDERS, f"hint provider {name!r} does not implement HintProvider"
        )
    return provider


class NumaAwareBuilder:
    """Builds the plugin every session (as Volcano does) but keeps the built-in providers, and so
    their per-topology indexes, for as long as the arguments stay the same: a node's CPU layout
    and device tables are then derived once, not once per session."""

    def __init__(self) -> None:
        self._key = ""
        self._providers: list[HintProvider] = []
        self._fingerprints: TopologyMemo[TopologyFingerprint] = fingerprint_memo()
        self._tables = AdmissionTables()

    def __call__(self, arguments: Arguments) -> NumaAwarePlugin:
        provider_arguments = provider_arguments_of(arguments)
        key = json.dumps(provider_arguments, sort_keys=True, default=repr)
        if key != self._key or not self._providers:
            self._key = key
            self._providers = builtin_providers(provider_arguments)
            self._tables = AdmissionTables()
        return NumaAwarePlugin(arguments, self._providers, self._fingerprints, self._tables)
