"""The frozen view of the cluster a session works on."""

from __future__ import annotations

import attrs

from numasched.api.disruption_budget import DisruptionBudget
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource


@attrs.define(slots=True)
class QueueInfo:
    """A Volcano Queue (scheduling.volcano.sh/v1beta1) as the queue plugins read it.

    capability, guarantee and deserved are None when the Queue does not set them (Volcano tells
    an absent ResourceList from an empty one: no capability means no limit)."""

    name: str
    weight: int = 1
    state: str = "Open"
    capability: Resource | None = None
    guarantee: Resource | None = None
    deserved: Resource | None = None
    parent: str = ""
    priority: int = 0
    # spec.reclaimable: None (absent) and True both let other queues reclaim from this one.
    reclaimable: bool = True
    # Hierarchical DRF: the annotations volcano.sh/hierarchy ("root/eng/dev") and
    # volcano.sh/hierarchy-weights ("1/2/8"), "" when absent.
    hierarchy: str = ""
    hierarchy_weights: str = ""
    # status.allocated as last written (None: never written), so only a change is written again.
    status_allocated: Resource | None = None
    # True for the default queue the cache stands in when the cluster has no Queue of that name:
    # there is no object to write a status to.
    implicit: bool = False


@attrs.define(slots=True)
class ClusterSnapshot:
    nodes: dict[str, NodeInfo] = attrs.field(factory=dict)
    jobs: dict[str, JobInfo] = attrs.field(factory=dict)
    queues: dict[str, QueueInfo] = attrs.field(factory=dict)
    priority_classes: dict[str, int] = attrs.field(factory=dict)
    # PodDisruptionBudgets by namespace/name (the pdb plugin reads them).
    disruption_budgets: dict[str, DisruptionBudget] = attrs.field(factory=dict)
