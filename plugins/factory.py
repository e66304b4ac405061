"""The built-in plugins, registered by name (Volcano's plugins/factory.go): the framework imports
no plugin; the runtime calls this to fill a registry."""

from __future__ import annotations

from numasched.plugins import (
    binpack,
    capacity,
    conformance,
    drf,
    gang,
    nodeorder,
    numa_affinity_group,
    overcommit,
    pdb,
    predicates,
    priority,
    proportion,
    task_topology,
)
from numasched.plugins.accepted_noops import ACCEPTED_NOOP_PLUGINS, WarnOnce, noop_builder
from numasched.plugins.dra import plugin as dra_plugin
from numasched.plugins.numaaware import plugin as numaaware_plugin
from numasched.scheduler.framework.registry import Registry


def register_builtin_plugins(registry: Registry, warnings: WarnOnce) -> None:
    """Every plugin numasched ships, and Volcano's plugins it accepts without effect (they warn
    once through `warnings`)."""
    registry.register_plugin(priority.PLUGIN_NAME, priority.build)
    registry.register_plugin(gang.PLUGIN_NAME, gang.build)
    registry.register_plugin(conformance.PLUGIN_NAME, conformance.build)
    registry.register_plugin(predicates.PLUGIN_NAME, predicates.build)
    registry.register_plugin(nodeorder.PLUGIN_NAME, nodeorder.build)
    registry.register_plugin(binpack.PLUGIN_NAME, binpack.build)
    registry.register_plugin(proportion.PLUGIN_NAME, proportion.build)
    registry.register_plugin(capacity.PLUGIN_NAME, capacity.build)
    registry.register_plugin(drf.PLUGIN_NAME, drf.build)
    registry.register_plugin(overcommit.PLUGIN_NAME, overcommit.build)
    registry.register_plugin(pdb.PLUGIN_NAME, pdb.build)
    registry.register_plugin(numaaware_plugin.PLUGIN_NAME, numaaware_plugin.NumaAwareBuilder())
    registry.register_plugin(task_topology.PLUGIN_NAME, task_topology.TaskTopologyBuilder())
    registry.register_plugin(dra_plugin.PLUGIN_NAME, dra_plugin.build)
    registry.register_plugin(numa_affinity_group.PLUGIN_NAME, numa_affinity_group.build)
    for name in ACCEPTED_NOOP_PLUGINS:
        registry.register_plugin(name, noop_builder(name, warnings))
