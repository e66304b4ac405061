"""The numa-aware plugin: place pods only where the kubelet's Topology Manager admits them, prefer
nodes where they span the fewest NUMA nodes, and record the CPUs, devices and memory chosen.

Arguments (volcano-scheduler.conf):
  weight          multiplies the 0-100 NUMA score (default 1)
  devices         device resource names the device provider aligns (default: its own list)
  hint-providers  extra providers by name, from the numasched.hint_providers entry points
Any other argument is handed to the provider factories (e.g. nic-resources, nic-alignment).

Pod annotation volcano.sh/numa-topology-policy asks for a policy; when it is stricter than the
node's kubelet policy it is enforced here on the scheduler side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from numasched.api.node import NodeInfo
from numasched.api.task import TaskInfo
from numasched.api.topology import TopologyPolicy
from numasched.plugins.numaaware.admission import Placement, place_pod
from numasched.plugins.numaaware.policy import PolicyError, check_numa_node_limit, parse_policy
from numasched.plugins.numaaware.providers.base import HintProvider, free_resources
from numasched.plugins.numaaware.providers.cpu import cpu_provider_factory
from numasched.plugins.numaaware.providers.device import ARG_DEVICE_RESOURCES, device_provider_factory
from numasched.plugins.numaaware.providers.memory import memory_provider_factory
from numasched.scheduler.arguments import Arguments
from numasched.scheduler.status import SUCCESS, Status, StatusCode

if TYPE_CHECKING:
    from numasched.scheduler.session import Event, Session

PLUGIN_NAME = "numa-aware"
POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"
ARG_WEIGHT = "weight"
ARG_DEVICES = "devices"
ARG_HINT_PROVIDERS = "hint-providers"
MAX_NODE_SCORE = 100

_log = structlog.get_logger(__name__)


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


def normalized_scores(numa_counts: Mapping[str, int], weight: int) -> dict[str, float]:
    """Volcano's reverse NormalizeScore: fewer NUMA nodes scores higher, 0-100, times weight."""
    highest = max(numa_counts.values(), default=0)
    scores: dict[str, float] = {}
    for node_name, count in numa_counts.items():
        score = MAX_NODE_SCORE if highest == 0 else MAX_NODE_SCORE - MAX_NODE_SCORE * count // highest
        scores[node_name] = float(score * weight)
    return scores


class NumaAwarePlugin:
    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.weight = arguments.get_int(ARG_WEIGHT, 1)
        self.extra_provider_names = arguments.get_list(ARG_HINT_PROVIDERS, [])
        provider_arguments: dict[str, Any] = dict(arguments)
        if ARG_DEVICES in arguments:
            provider_arguments[ARG_DEVICE_RESOURCES] = arguments.get_list(ARG_DEVICES, [])
        self.provider_arguments = provider_arguments
        self.providers: list[HintProvider] = [
            cpu_provider_factory(provider_arguments),
            device_provider_factory(provider_arguments),
            memory_provider_factory(provider_arguments),
        ]
        # (task uid, node name) -> placement found by the predicate, for scoring in the same pass.
        self._placements: dict[tuple[str, str], Placement] = {}

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    def on_session_open(self, ssn: Session) -> None:
        from numasched.scheduler.session import EventHandler

        self.providers = self.providers[:3] + self._extra_providers(ssn)
        ssn.add_pre_predicate_fn(PLUGIN_NAME, self.pre_predicate)
        ssn.add_predicate_fn(PLUGIN_NAME, self.predicate)
        ssn.add_batch_node_order_fn(PLUGIN_NAME, self.batch_node_order)
        ssn.add_event_handler(EventHandler(allocate=self.on_allocate, deallocate=self.on_deallocate))

    def on_session_close(self, ssn: Session) -> None:
        self._placements.clear()

    def _extra_providers(self, ssn: Session) -> list[HintProvider]:
        extra: list[HintProvider] = []
        for provider_name in self.extra_provider_names:
            try:
                factory = ssn.registry.hint_provider(provider_name)
                provider = factory(self.provider_arguments)
            except LookupError as error:
                _log.error(
                    "unknown hint provider, it is not used",
                    plugin=PLUGIN_NAME,
                    provider=provider_name,
                    error=str(error),
                )
                continue
            except (TypeError, ValueError) as error:
                _log.error(
                    "hint provider cannot be built", plugin=PLUGIN_NAME, provider=provider_name, error=str(error)
                )
                continue
            if not isinstance(provider, HintProvider):
                _log.error("hint provider does not implement HintProvider", plugin=PLUGIN_NAME, provider=provider_name)
                continue
            extra.append(provider)
        return extra

    def pre_predicate(self, task: TaskInfo) -> Status:
        """A bad policy annotation rules out every node: say so once, not once per node."""
        try:
            pod_policy(task)
        except PolicyError as error:
            return Status(
                StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"pod {task.key}: annotation {POLICY_ANNOTATION}: {error}",
                PLUGIN_NAME,
            )
        return Status()

    # -- placement --------------------------------------------------------------------------------

    def place(self, task: TaskInfo, node: NodeInfo) -> Placement | Status:
        """The placement on this node, or the status that rules the node out."""
        try:
            requested = pod_policy(task)
        except PolicyError as error:
            return Status(
                StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"pod {task.key}: annotation {POLICY_ANNOTATION}: {error}",
                PLUGIN_NAME,
            )
        topology = node.topology
        if topology is None:
            if requested is None or requested is TopologyPolicy.NONE:
                return Placement(True)
            why = f" ({node.topology_error})" if node.topology_error else ""
            return Status(
                StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"node {node.name} reports no NUMA topology{why}; pod asks for {requested.value}",
                PLUGIN_NAME,
            )
        node_policy = topology.policies.topology_manager_policy
        refusal = check_numa_node_limit(node_policy, len(topology.numa_ids), topology.policies.max_allowable_numa_nodes)
        if refusal is not None:
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, f"node {node.name}: {refusal}", PLUGIN_NAME)
        policy = stricter(node_policy, requested)
        placement = place_pod(task, topology, free_resources(node), self.providers, policy)
        if not placement.admitted:
            return Status.unschedulable(f"node {node.name}: {placement.reason}", PLUGIN_NAME)
        return placement

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        outcome = self.place(task, node)
        if isinstance(outcome, Status):
            self._placements.pop((task.uid, node.name), None)
            return outcome
        self._placements[(task.uid, node.name)] = outcome
        return SUCCESS

    def batch_node_order(self, task: TaskInfo, nodes: Sequence[NodeInfo]) -> dict[str, float]:
        counts: dict[str, int] = {}
        for node in nodes:
            if node.topology is None:
                continue
            placement = self._placements.get((task.uid, node.name))
            if placement is None:
                outcome = self.place(task, node)
                if isinstance(outcome, Status):
                    continue
                placement = outcome
            counts[node.name] = placement.numa.count()
        return normalized_scores(counts, self.weight)

    # -- events -----------------------------------------------------------------------------------

    def on_allocate(self, event: Event) -> None:
        """Decide the task's CPUs, devices and memory on its node. The statement then accounts
        task.allocation in the node's NUMA ledger, so later pods of this session see it."""
        task, node = event.task, event.node
        self._forget_node(node.name)
        if node.topology is None:
            return
        task.allocation = None
        outcome = self.place(task, node)
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

    def on_deallocate(self, event: Event) -> None:
        # The statement removes the allocation from the node's ledger and clears it on roll back;
        # an evicted (releasing) task keeps holding its CPUs and devices until it is gone.
        self._forget_node(event.node.name)

    def _forget_node(self, node_name: str) -> None:
        for key in [key for key in self._placements if key[1] == node_name]:
            del self._placements[key]


def build(arguments: Arguments) -> NumaAwarePlugin:
    return NumaAwarePlugin(arguments)
