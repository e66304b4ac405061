"""Volcano plugins that a volcano-scheduler.conf may name but that numasched does not implement.

They are accepted so an existing configuration loads, and each name is warned about once per
registry, since a configuration that relies on them is not getting their policy.
"""

from __future__ import annotations

import structlog

from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.plugin import PluginBuilder
from numasched.scheduler.framework.session import Session

_log = structlog.get_logger(__name__)

ACCEPTED_NOOP_PLUGINS: tuple[str, ...] = (
    "cdp",
    "deviceshare",
    "extender",
    "network-topology-aware",
    "nodegroup",
    "rescheduling",
    "resource-strategy-fit",
    "resourcequota",
    "sla",
    "tdm",
    "usage",
)


# shuffle evicts running pods that a plugin's victim function (rescheduling, by node usage) picks;
# no plugin of numasched implements that function, so shuffle would never evict anything.
ACCEPTED_NOOP_ACTIONS: tuple[str, ...] = ("shuffle",)


class WarnOnce:
    """Remembers which names were already warned about; one instance per registry."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()

    def warn(self, name: str, kind: str = "plugin") -> bool:
        if (kind, name) in self._warned:
            return False
        self._warned.add((kind, name))
        _log.warning(
            f"{kind} accepted for compatibility with Volcano but not implemented by numasched; it has no effect",
            **{kind: name},
        )
        return True


class AcceptedNoopPlugin:
    def __init__(self, name: str) -> None:
        self.name = name

    def on_session_open(self, ssn: Session) -> None:
        return None

    def on_session_close(self, ssn: Session) -> None:
        return None


def noop_builder(name: str, warnings: WarnOnce) -> PluginBuilder:
    def build(arguments: Arguments) -> AcceptedNoopPlugin:
        warnings.warn(name)
        return AcceptedNoopPlugin(name)

    return build


class AcceptedNoopAction:
    """An action a Volcano configuration may list; it warns once and changes nothing."""

    def __init__(self, name: str, warnings: WarnOnce) -> None:
        self.name = name
        self._warnings = warnings

    def execute(self, ssn: Session) -> None:
        self._warnings.warn(self.name, kind="action")
