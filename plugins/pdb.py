"""pdb: victims of preempt and reclaim stay within every PodDisruptionBudget (Volcano's pdb plugin).

Extension points, as Volcano registers them: preemptable and reclaimable (the same filter; Volcano
also registers it as a victimTasks function, read only by shuffle, which numasched accepts as a
no-op). The filter walks the candidates in the order given and, for each budget that selects the
pod (same namespace, selector matches its labels) and does not list it in status.disruptedPods,
takes one from what the budget still allows; a candidate that takes any budget below zero is not a
victim. So no set of victims the filter returns exceeds a budget, and any subset of it does not
either.

What a budget allows, per session:
- status.disruptionsAllowed when the object has a status (the disruption controller's figure, the
  one the Eviction API enforces), less the pods it selects that this session already evicted
  (statement evictions, committed or not, that are not in status.disruptedPods);
- else what the controller would write, from the pods it selects now: healthy (running, not
  terminating) minus the desired healthy count from minAvailable / maxUnavailable (percentages of
  the pods it selects that have not finished, rounded up). Pods this session evicted are
  terminating, so they are already counted.

Where numasched differs from Volcano, on purpose: Volcano's filter drops every pod that has no
labels from the victims (a `continue` that skips the append); here such a pod is held by the
budgets that select it (an empty selector does). Selectors are read as policy/v1 reads them, as
the Eviction API enforces them: an empty one selects every pod of the namespace, where Volcano
skips the budget. Volcano reads only status.disruptionsAllowed (0 for a budget without a status);
numasched computes the figure when there is no status.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from numasched.api.disruption_budget import DisruptionBudget, computed_disruptions_allowed
from numasched.api.task import TaskInfo, TaskStatus
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, Session

PLUGIN_NAME = "pdb"
_HEALTHY = frozenset({TaskStatus.RUNNING})
_FINISHED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})


@attrs.define(slots=True)
class _Covered:
    """A budget and the placed pods it selects, as of the session's opening."""

    budget: DisruptionBudget
    pods: list[TaskInfo]
    # Pods that were already terminating when the session opened (not this session's evictions).
    releasing_at_open: frozenset[str]

    def allowed_now(self) -> int:
        """Disruptions the budget allows at this point of the session."""
        budget = self.budget
        if budget.disruptions_allowed is not None:
            evicted_here = sum(
                1
                for pod in self.pods
                if pod.status is TaskStatus.RELEASING
                and pod.uid not in self.releasing_at_open
                and pod.name not in budget.disrupted_pods
            )
            return budget.disruptions_allowed - evicted_here
        expected = sum(1 for pod in self.pods if pod.status not in _FINISHED)
        healthy = sum(1 for pod in self.pods if pod.status in _HEALTHY)
        return computed_disruptions_allowed(budget, expected, healthy)


def within_budgets(candidates: Sequence[TaskInfo], covered: Sequence[_Covered]) -> list[TaskInfo]:
    """Volcano's pdbFilterFn over the candidates, in their order, with each budget's allowance
    as `covered` says it is now."""
    allowed = [entry.allowed_now() for entry in covered]
    victims: list[TaskInfo] = []
    for task in candidates:
        violated = False
        for index, entry in enumerate(covered):
            budget = entry.budget
            if not budget.matches(task.namespace, task.labels) or task.name in budget.disrupted_pods:
                continue
            allowed[index] -= 1
            if allowed[index] < 0:
                violated = True
        if not violated:
            victims.append(task)
    return victims


class PdbPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.covered: list[_Covered] = []

    def on_session_open(self, ssn: Session) -> None:
        budgets = sorted(ssn.snapshot.disruption_budgets.values(), key=lambda budget: budget.key)
        # Placed pods by namespace: a budget only ever selects pods of its own namespace.
        placed: dict[str, list[TaskInfo]] = {}
        for node in ssn.nodes.values():
            for task in node.tasks.values():
                placed.setdefault(task.namespace, []).append(task)
        self.covered = []
        for budget in budgets:
            pods = [task for task in placed.get(budget.namespace, ()) if budget.matches(task.namespace, task.labels)]
            releasing = frozenset(task.uid for task in pods if task.status is TaskStatus.RELEASING)
            self.covered.append(_Covered(budget, pods, releasing))
        ssn.add_preemptable_fn(self.name, self.filter_victims)
        ssn.add_reclaimable_fn(self.name, self.filter_victims)

    def on_session_close(self, ssn: Session) -> None:
        self.covered = []

    def filter_victims(self, evictor: TaskInfo, candidates: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]:
        return within_budgets(candidates, self.covered), PERMIT


def build(arguments: Arguments) -> PdbPlugin:
    return PdbPlugin(arguments)
