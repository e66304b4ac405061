"""The parsed scheduler configuration: actions, tiers of plugins with their arguments and flags.

Each plugin option carries Volcano's enable* flags; a flag left out of the file is enabled, as in
Volcano's ApplyPluginConfDefaults.
"""

from __future__ import annotations

from typing import Any

import attrs

# Extension point → the YAML key of the flag that gates it. Volcano spells a few with "enabled".
FLAG_KEYS: dict[str, str] = {
    "jobOrder": "enableJobOrder",
    "hierarchy": "enableHierarchy",
    "jobReady": "enableJobReady",
    "jobPipelined": "enableJobPipelined",
    "taskOrder": "enableTaskOrder",
    "preemptable": "enablePreemptable",
    "reclaimable": "enableReclaimable",
    "preemptive": "enablePreemptive",
    "queueOrder": "enableQueueOrder",
    "clusterOrder": "enableClusterOrder",
    "predicate": "enablePredicate",
    "bestNode": "enableBestNode",
    "nodeOrder": "enableNodeOrder",
    "targetJob": "enableTargetJob",
    "reservedNodes": "enableReservedNodes",
    "jobEnqueued": "enableJobEnqueued",
    "victim": "enabledVictim",
    "jobStarving": "enableJobStarving",
    "overused": "enabledOverused",
    "allocatable": "enabledAllocatable",
    "hyperNodeOrder": "enableHyperNodeOrder",
    "subJobReady": "enableSubJobReady",
    "subJobPipelined": "enableSubJobPipelined",
    "subJobOrder": "enableSubJobOrder",
}


@attrs.frozen(slots=True)
class PluginOption:
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    # Extension point (a FLAG_KEYS key) → enabled; a point not listed is enabled.
    flags: dict[str, bool] = attrs.field(factory=dict)

    def is_enabled(self, point: str) -> bool:
        return self.flags.get(point, True)


@attrs.frozen(slots=True)
class Tier:
    plugins: tuple[PluginOption, ...] = ()


@attrs.frozen(slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = ()
    tiers: tuple[Tier, ...] = ()
    # The "configurations" section: per-action arguments by action name.
    configurations: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    metrics: dict[str, str] = attrs.field(factory=dict)

    def plugin_names(self) -> list[str]:
        return [option.name for tier in self.tiers for option in tier.plugins]
