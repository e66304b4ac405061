"""The numa-aware policy API's documents and the configuration edit behind a PUT: pure functions.

GET /rest/scheduling/v1/numaaware answers whether the numa-aware plugin is in the configuration in
force, with its arguments, weight and tier. A PUT body `{"status": "open" | "close"}` (with
optional `arguments` and `weight` when opening) becomes a new configuration text, which the caller
validates with the configuration loader and puts in force through the hot reload path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import yaml

from numasched.conf.model import PluginOption, SchedulerConfig

NUMA_AWARE = "numa-aware"
OPEN = "open"
CLOSE = "close"
# Arguments a numa-aware entry gets when a PUT opens it and the configuration has none to keep
# (the default configuration's).
DEFAULT_ARGUMENTS: Mapping[str, Any] = {"weight": 10}
# Plugins beside which an added numa-aware entry goes: the tier that filters and scores nodes.
_NODE_TIER_PLUGINS = frozenset({"predicates", "nodeorder", "binpack"})


class PolicyRequestError(ValueError):
    """A request the API refuses (400): `field` names the part of the body or configuration."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@attrs.frozen(slots=True)
class NumaAwareState:
    enabled: bool
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    tier: int | None = None
    flags: Mapping[str, bool] = attrs.field(factory=dict)

    @property
    def weight(self) -> Any:
        return self.arguments.get("weight")


def numa_aware_state(config: SchedulerConfig) -> NumaAwareState:
    """The first numa-aware entry of the configuration (the one the session builds)."""
    for index, tier in enumerate(config.tiers):
        option: PluginOption
        for option in tier.plugins:
            if option.name == NUMA_AWARE:
                return NumaAwareState(True, dict(option.arguments), index, dict(option.flags))
    return NumaAwareState(False)


def state_document(state: NumaAwareState, *, source: str, writable: bool, generation: int) -> dict[str, Any]:
    """The JSON answer of GET (and of a successful PUT)."""
    return {
        "status": OPEN if state.enabled else CLOSE,
        "enabled": state.enabled,
        "weight": state.weight,
        "arguments": dict(state.arguments),
        "tier": state.tier,
        "flags": dict(state.flags),
        "source": source,
        "writable": writable,
        "generation": generation,
    }


@attrs.frozen(slots=True)
class PolicyChange:
    enable: bool
    # Arguments to set on the entry (a null value removes that argument); None: keep them.
    arguments: Mapping[str, Any] | None = None


def parse_change(body: Any) -> PolicyChange:
    """The change a PUT body asks for; PolicyRequestError names the field that is wrong."""
    if not isinstance(body, Mapping):
        raise PolicyRequestError("body", f'expected a JSON object such as {{"status": "close"}}, got {_kind(body)}')
    unknown = sorted(set(map(str, body)) - {"status", "arguments", "weight"})
    if unknown:
        raise PolicyRequestError(unknown[0], "unknown field; expected status, arguments, weight")
    status = body.get("status")
    if status not in (OPEN, CLOSE):
        raise PolicyRequestError("status", f'expected "open" or "close", got {status!r}')
    arguments = body.get("arguments")
    if arguments is not None and not isinstance(arguments, Mapping):
        raise PolicyRequestError("arguments", f"expected an object of argument names to values, got {_kind(arguments)}")
    weight = body.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float)):
        raise PolicyRequestError("weight", f"expected a number, got {_kind(weight)}")
    if status == CLOSE:
        for name in ("arguments", "weight"):
            if body.get(name) is not None:
                raise PolicyRequestError(name, 'only allowed with "status": "open"')
        return PolicyChange(False)
    merged: dict[str, Any] | None = None
    if arguments is not None or weight is not None:
        merged = {str(key): value for key, value in (arguments or {}).items()}
        if weight is not None:
            merged["weight"] = weight
    return PolicyChange(True, merged)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def apply_change(text: str, change: PolicyChange) -> str:
    """The configuration text with the change made. Comments and key order of what is not touched
    are not kept (the text is re-written from its YAML); the loader checks the result."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyRequestError("configuration", f"the configuration in force is not YAML: {error}") from None
    if not isinstance(document, dict):
        raise PolicyRequestError("configuration", f"expected a mapping with actions and tiers, got {_kind(document)}")
    tiers = document.get("tiers")
    if tiers is None:
        tiers = document["tiers"] = []
    if not isinstance(tiers, list) or not all(
        isinstance(tier, dict) and isinstance(tier.get("plugins") or [], list) for tier in tiers
    ):
        raise PolicyRequestError("configuration.tiers", "expected a list of tiers, each with a list of plugins")
    if change.enable:
        _open(tiers, change.arguments)
    else:
        _close(document, tiers)
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _entries(tiers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        plugin
        for tier in tiers
        for plugin in tier.get("plugins") or []
        if isinstance(plugin, dict) and plugin.get("name") == NUMA_AWARE
    ]


def _open(tiers: list[dict[str, Any]], arguments: Mapping[str, Any] | None) -> None:
    entries = _entries(tiers)
    if entries:
        entry = entries[0]
        if arguments is not None:
            current = entry.get("arguments")
            merged = dict(current) if isinstance(current, dict) else {}
            merged.update(arguments)
            entry["arguments"] = {key: value for key, value in merged.items() if value is not None}
        return
    chosen = dict(DEFAULT_ARGUMENTS)
    if arguments is not None:
        chosen.update(arguments)
    entry = {"name": NUMA_AWARE, "arguments": {key: value for key, value in chosen.items() if value is not None}}
    for tier in tiers:
        names = {plugin.get("name") for plugin in tier.get("plugins") or [] if isinstance(plugin, dict)}
        if names & _NODE_TIER_PLUGINS:
            tier.setdefault("plugins", []).append(entry)
            return
    if tiers:
        tiers[-1].setdefault("plugins", []).append(entry)
    else:
        tiers.append({"plugins": [entry]})


def _close(document: dict[str, Any], tiers: list[dict[str, Any]]) -> None:
    kept = []
    for tier in tiers:
        plugins = tier.get("plugins") or []
        remaining = [
            plugin for plugin in plugins if not (isinstance(plugin, dict) and plugin.get("name") == NUMA_AWARE)
        ]
        if plugins and not remaining:
            continue  # the tier held numa-aware alone: an empty tier would only draw a warning
        tier["plugins"] = remaining
        kept.append(tier)
    document["tiers"] = kept
