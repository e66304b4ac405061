"""The registry the scheduler runs with: the framework's Registry filled with the built-in plugins
and actions (their factories), and third-party entry points when asked."""

from __future__ import annotations

from numasched.plugins.accepted_noops import WarnOnce
from numasched.plugins.factory import register_builtin_plugins
from numasched.scheduler.actions.factory import register_builtin_actions
from numasched.scheduler.framework.registry import Registry


def default_registry(*, with_entry_points: bool = False) -> Registry:
    """Every built-in plugin and action; entry points too when asked."""
    registry = Registry()
    # Accepted-but-unimplemented plugins and actions warn once for the life of this registry.
    warnings = WarnOnce()
    register_builtin_plugins(registry, warnings)
    register_builtin_actions(registry, warnings)
    if with_entry_points:
        registry.load_entry_points()
    return registry
