"""The frozen view of the cluster a session works on."""

from __future__ import annotations

import attrs

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo


@attrs.define(slots=True)
class QueueInfo:
    name: str
    weight: int = 1
    state: str = "Open"


@attrs.define(slots=True)
class ClusterSnapshot:
    nodes: dict[str, NodeInfo] = attrs.field(factory=dict)
    jobs: dict[str, JobInfo] = attrs.field(factory=dict)
    queues: dict[str, QueueInfo] = attrs.field(factory=dict)
    priority_classes: dict[str, int] = attrs.field(factory=dict)
