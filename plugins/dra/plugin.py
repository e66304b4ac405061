"""The `dra` plugin: pods with ResourceClaims go only where their claims can be allocated, and get
their devices when they are placed.

- pre-predicate: a claim the pod references that is missing or not created yet (a template's claim
  before the resource claim controller made it) keeps the pod waiting, the message naming it;
- predicate: on this node every claim without an allocation can be allocated from the devices of
  the slices that apply to the node (nodeName, nodeSelector, allNodes), those of other claims and
  of this session's placements taken out; a claim already allocated pins the pod to its node;
- node order: the device set's score (plugins/dra/allocator.DeviceSetScore.node_score, 0-100 times
  `weight`): one NUMA node and one PCIe root first;
- allocate: where numa-aware did not choose the devices (a node without NUMA topology, numa-aware
  not configured), the best-scored set, inside the NUMA nodes of the pod's CPUs when they fit there.
  The devices go into the pod's allocation as ledger entries (api/dra_claims), so the node's
  ledger holds them with the CPUs and a roll back releases them; the binder writes them to the
  claims' status before it binds the pod.

Arguments: weight (default 1).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import structlog

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.dra_claims import claim_resource, in_use_with_ledger, ledger_entries
from numasched.api.node import NodeInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.plugins.dra.allocator import ClaimsDoNotFit, PodClaimsAllocation, allocate_claims
from numasched.plugins.dra.cel import CelEvaluator
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode

if TYPE_CHECKING:
    from numasched.scheduler.framework.session import Event, Session

PLUGIN_NAME = "dra"
_log = structlog.get_logger(__name__)
ARG_WEIGHT = "weight"


def pending_claim_keys(task: TaskInfo) -> list[str]:
    return [claim.key for claim in task.claims.pending()] if task.claims is not None else []


def allocated_in_ledger(task: TaskInfo) -> bool:
    """Whether the task's allocation already holds devices for every claim it must allocate."""
    pending = pending_claim_keys(task)
    if not pending:
        return True
    if task.allocation is None:
        return False
    held = task.allocation.resources()
    return all(claim_resource(key) in held for key in pending)


class DraPlugin:
    def __init__(self, arguments: Arguments, evaluator: CelEvaluator | None = None) -> None:
        self.weight = arguments.get_int(ARG_WEIGHT, 1)
        if self.weight < 0:
            raise arguments.invalid(ARG_WEIGHT, f"expected a non-negative integer, got {self.weight}")
        self._evaluator = evaluator if evaluator is not None else CelEvaluator()
        # Per (task uid, node name): the node generation and the outcome there.
        self._outcomes: dict[tuple[str, str], tuple[int, PodClaimsAllocation | ClaimsDoNotFit]] = {}

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    def on_session_open(self, ssn: Session) -> None:
        from numasched.scheduler.framework.session import EventHandler

        ssn.add_pre_predicate_fn(PLUGIN_NAME, self.pre_predicate)
        ssn.add_predicate_fn(PLUGIN_NAME, self.predicate)
        ssn.add_node_order_fn(PLUGIN_NAME, self.node_order)
        ssn.add_event_handler(EventHandler(allocate=self.on_allocate))

    def on_session_close(self, ssn: Session) -> None:
        self._outcomes.clear()

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        return task.claims

    def pre_predicate(self, task: TaskInfo) -> Status:
        if task.claims is not None and task.claims.problem:
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, task.claims.problem, PLUGIN_NAME)
        return SUCCESS

    def outcome(self, task: TaskInfo, node: NodeInfo) -> PodClaimsAllocation | ClaimsDoNotFit | None:
        """The claims allocated on this node as it is now (None: the pod has no claims)."""
        claims = task.claims
        if claims is None or not claims.claims:
            return None
        key = (task.uid, node.name)
        known = self._outcomes.get(key)
        if known is not None and known[0] == node.generation:
            return known[1]
        dra = node.dra
        if dra is None:
            pending = ", ".join(claim.key for claim in claims.claims)
            found: PodClaimsAllocation | ClaimsDoNotFit = ClaimsDoNotFit(
                f"node(s) had no ResourceSlices for ResourceClaims {pending}"
            )
        else:
            dra = in_use_with_ledger(dra, node.numa_usage.devices)
            found = allocate_claims(
                claims.claims, dra.devices, dra.in_use, dra.classes, self._evaluator, topology=node.topology
            )
        self._outcomes[key] = (node.generation, found)
        return found

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        found = self.outcome(task, node)
        if isinstance(found, ClaimsDoNotFit):
            return Status.unschedulable(found.reason, PLUGIN_NAME)
        return SUCCESS

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        found = self.outcome(task, node)
        if not isinstance(found, PodClaimsAllocation):
            return 0.0
        return float(found.score.node_score(found.numa.count()) * self.weight)

    def on_allocate(self, event: Event) -> None:
        task, node = event.task, event.node
        if task.status is TaskStatus.PIPELINED or allocated_in_ledger(task):
            return
        claims = task.claims
        dra = node.dra
        if claims is None or dra is None:
            return
        # The ledger holds the task already (the statement added it before the handlers run), but
        # not its devices for claims: only what the ledger held before.
        dra = in_use_with_ledger(dra, node.numa_usage.devices)
        cpus_numa = task.allocation.numa() if task.allocation is not None else None
        found: PodClaimsAllocation | ClaimsDoNotFit = ClaimsDoNotFit("")
        if cpus_numa is not None and cpus_numa.count():
            found = allocate_claims(
                claims.claims,
                dra.devices,
                dra.in_use,
                dra.classes,
                self._evaluator,
                topology=node.topology,
                numa_restriction=cpus_numa,
            )
        if isinstance(found, ClaimsDoNotFit):
            found = allocate_claims(
                claims.claims, dra.devices, dra.in_use, dra.classes, self._evaluator, topology=node.topology
            )
        if isinstance(found, ClaimsDoNotFit):
            # The predicate passed on this node; only a plugin allocating outside the predicates
            # gets here. The binder then refuses the pod for want of its claims' allocation.
            _log.error("ResourceClaims no longer fit", pod=task.key, node=node.name, reason=found.reason)
            return
        entries = ledger_entries(found.allocations)
        containers = task.allocation.containers if task.allocation is not None else ()
        task.allocation = PodAllocation((*containers, ContainerAllocation(name="", devices=entries)))


def build(arguments: Arguments) -> DraPlugin:
    return DraPlugin(arguments)
