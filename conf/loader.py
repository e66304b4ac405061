"""Read Volcano's volcano-scheduler.conf YAML into a SchedulerConfig.

The file is parsed into PyYAML's node tree first and walked from there, so every error names the
source, the line and the field path ("tiers[1].plugins[2].enablePredicate"). The accepted format is
Volcano's: `actions` as a comma-separated string, `tiers` of `plugins` with `name`, `arguments` and
the enable* flags (a flag left out is enabled, as Volcano's ApplyPluginConfDefaults does),
`configurations` as a list of {name, arguments} and `metrics` as a string map. A whole ConfigMap
manifest that carries the file under data["volcano-scheduler.conf"] is accepted as well.

Volcano ignores keys it does not know; so do we, but each one is reported as a warning.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import structlog
import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from numasched.conf.model import FLAG_KEYS, PluginOption, SchedulerConfig, Tier

# The ConfigMap key Volcano mounts as its scheduler configuration file.
CONFIG_KEY = "volcano-scheduler.conf"
DEFAULT_SOURCE_NAME = CONFIG_KEY

# YAML key of an enable* flag → the extension point it gates.
_POINT_BY_FLAG_KEY: dict[str, str] = {key: point for point, key in FLAG_KEYS.items()}
_PLUGIN_KEYS: tuple[str, ...] = ("name", "arguments", *FLAG_KEYS.values())
_TOP_LEVEL_KEYS: tuple[str, ...] = ("actions", "tiers", "configurations", "metrics")
_TIER_KEYS: tuple[str, ...] = ("plugins",)
_CONFIGURATION_KEYS: tuple[str, ...] = ("name", "arguments")

_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"

WarningSink = Callable[[str], None]

_log = structlog.get_logger("numasched.conf")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the source, the line and the field."""

    def __init__(self, source: str, line: int | None, path: str, detail: str) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.detail = detail
        super().__init__(format_location(source, line, path) + detail)


@runtime_checkable
class PluginArgumentChecker(Protocol):
    """known_plugins that can also judge a plugin's arguments (the registry's PluginCatalog).

    Given as known_plugins, every configured plugin's arguments are checked while loading, so a
    wrong argument refuses the configuration like any other error in it.
    """

    def plugin_argument_problem(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
        """(argument key or "", what is wrong), or None when the plugin builds from these arguments."""
        ...


def format_location(source: str, line: int | None, path: str) -> str:
    """ "volcano-scheduler.conf line 7: tiers[1].name: " — the prefix of every message."""
    location = source if line is None else f"{source} line {line}"
    return f"{location}: {path}: " if path else f"{location}: "


def _log_warning(message: str) -> None:
    _log.warning("config warning", detail=message)


def load_config_text(
    text: str,
    source_name: str = DEFAULT_SOURCE_NAME,
    known_plugins: Collection[str] | None = None,
    known_actions: Collection[str] | None = None,
    *,
    on_warning: WarningSink | None = None,
) -> SchedulerConfig:
    """Parse the text of a volcano-scheduler.conf (or of a ConfigMap manifest holding one).

    known_plugins / known_actions come from the registry; None skips that check (a pure parse).
    Raises ConfigError; warnings (ignored keys) go to on_warning, or to the log when it is None.
    """
    reader = _Reader(source_name, 0, on_warning or _log_warning)
    root = reader.compose(text)
    manifest = reader.embedded_config(root)
    if manifest is not None:
        inner_text, inner_source, line_offset = manifest
        reader = _Reader(inner_source, line_offset, on_warning or _log_warning)
        root = reader.compose(inner_text)
    return reader.read_config(root, known_plugins, known_actions)


def load_config_file(
    path: str | Path,
    known_plugins: Collection[str] | None = None,
    known_actions: Collection[str] | None = None,
    *,
    on_warning: WarningSink | None = None,
) -> SchedulerConfig:
    """Read and parse a configuration file; the file's path is the source named in errors."""
    text = read_config_file(path)
    return load_config_text(text, str(path), known_plugins, known_actions, on_warning=on_warning)


def read_config_file(path: str | Path) -> str:
    """The file's text, or a ConfigError saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), None, "", f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise ConfigError(str(path), None, "", f"cannot read the file: {error.strerror or error}") from None


def config_from_configmap(obj: Mapping[str, Any], key: str = CONFIG_KEY) -> str:
    """The configuration text a ConfigMap object (as the API returns it) carries under `key`."""
    source = f"ConfigMap {_object_name(obj)}"
    if not isinstance(obj, Mapping):
        raise ConfigError("ConfigMap", None, "", f"expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind is not None and kind != "ConfigMap":
        raise ConfigError(source, None, "kind", f"expected ConfigMap, got {kind!r}")
    data = obj.get("data")
    if data is None:
        raise ConfigError(source, None, "data", f"missing; expected a key {key!r}")
    if not isinstance(data, Mapping):
        raise ConfigError(source, None, "data", f"expected a mapping, got {type(data).__name__}")
    if key not in data:
        present = ", ".join(repr(name) for name in sorted(map(str, data))) or "none"
        raise ConfigError(source, None, "data", f"no key {key!r} (keys present: {present})")
    text = data[key]
    if not isinstance(text, str):
        raise ConfigError(source, None, f"data[{key!r}]", f"expected a string, got {type(text).__name__}")
    return text


def _object_name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "<no metadata>"
    name = str(metadata.get("name") or "<no name>")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def _describe(node: Node) -> str:
    """What a node holds, for "expected X, got Y" messages."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, ScalarNode):
        if node.tag == _NULL_TAG:
            return "nothing (null)"
        if node.tag == _STR_TAG:
            return repr(node.value)
        return str(node.value)
    return type(node).__name__


def _unknown_keys_message(unknown: list[str], allowed: Collection[str]) -> str:
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(allowed), n=1)
        parts.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    noun = "key" if len(unknown) == 1 else "keys"
    return f"unknown {noun} {', '.join(parts)} ignored"


class _Reader:
    """Walks one document's node tree; knows the source and how to turn nodes into messages."""

    def __init__(self, source: str, line_offset: int, warn: WarningSink) -> None:
        self.source = source
        self.line_offset = line_offset
        self.warn_sink = warn
        self.constructor = SafeConstructor()

    # -- plumbing -------------------------------------------------------------------------------

    def line(self, node: Node) -> int:
        return int(node.start_mark.line) + 1 + self.line_offset

    def error(self, node: Node, path: str, detail: str) -> ConfigError:
        return ConfigError(self.source, self.line(node), path, detail)

    def warn(self, node: Node, path: str, detail: str) -> None:
        self.warn_sink(format_location(self.source, self.line(node), path) + detail)

    def compose(self, text: str) -> Node:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            line = None if mark is None else int(mark.line) + 1 + self.line_offset
            problem = error.problem or error.context or "cannot parse"
            raise ConfigError(self.source, line, "", f"invalid YAML: {problem}") from None
        except yaml.YAMLError as error:
            raise ConfigError(self.source, None, "", f"invalid YAML: {error}") from None
        if root is None:
            raise ConfigError(
                self.source, 1 + self.line_offset, "", "the configuration is empty; expected actions and tiers"
            )
        return root

    def value(self, node: Node, path: str) -> Any:
        """The plain Python value of a subtree (argument values: numbers, strings, lists, maps)."""
        try:
            return self.constructor.construct_document(node)
        except yaml.MarkedYAMLError as error:
            line = (
                self.line(node) if error.problem_mark is None else int(error.problem_mark.line) + 1 + self.line_offset
            )
            raise ConfigError(self.source, line, path, f"cannot read value: {error.problem or error}") from None
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as error:
            # A scalar that looks like a timestamp but is no date (2020-13-45) fails in the constructor.
            raise self.error(node, path, f"cannot read value {_describe(node)}: {error}") from None

    def entries(self, node: MappingNode, path: str) -> dict[str, tuple[Node, Node]]:
        """A mapping's entries by key, rejecting non-string, duplicate and merge keys."""
        found: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise self.error(key_node, path, "YAML merge keys (<<) are not supported here")
            if not isinstance(key_node, ScalarNode) or key_node.tag != _STR_TAG:
                raise self.error(key_node, path, f"keys must be strings, got {_describe(key_node)}")
            key = str(key_node.value)
            if key in found:
                first_line = self.line(found[key][0])
                where = f"{path}.{key}" if path else key
                raise self.error(key_node, where, f"duplicate key (first given on line {first_line})")
            found[key] = (key_node, value_node)
        return found

    def warn_unknown(self, path: str, entries: Mapping[str, tuple[Node, Node]], allowed: Collection[str]) -> None:
        unknown = [key for key in entries if key not in allowed]
        if unknown:
            self.warn(entries[unknown[0]][0], path, _unknown_keys_message(unknown, allowed))

    def mapping(self, node: Node, path: str, expected: str) -> MappingNode | None:
        """node as a mapping; None for an empty value (null); an error for anything else."""
        if isinstance(node, MappingNode):
            return node
        if isinstance(node, ScalarNode) and node.tag == _NULL_TAG:
            return None
        raise self.error(node, path, f"expected {expected}, got {_describe(node)}")

    def sequence(self, node: Node, path: str, expected: str) -> SequenceNode | None:
        if isinstance(node, SequenceNode):
            return node
        if isinstance(node, ScalarNode) and node.tag == _NULL_TAG:
            return None
        raise self.error(node, path, f"expected {expected}, got {_describe(node)}")

    def string(self, node: Node, path: str) -> str:
        if isinstance(node, ScalarNode) and node.tag == _STR_TAG:
            return str(node.value)
        raise self.error(node, path, f"expected a string, got {_describe(node)}")

    # -- ConfigMap manifests --------------------------------------------------------------------

    def embedded_config(self, root: Node) -> tuple[str, str, int] | None:
        """(text, source, line offset) of the configuration a ConfigMap manifest carries, if root is one."""
        if not isinstance(root, MappingNode):
            return None
        entries = self.entries(root, "")
        kind = entries.get("kind")
        if kind is None or not isinstance(kind[1], ScalarNode) or kind[1].value != "ConfigMap":
            return None
        if "data" not in entries:
            raise self.error(root, "data", f"this ConfigMap has no data; expected a key {CONFIG_KEY!r}")
        data = self.mapping(entries["data"][1], "data", "a mapping")
        if data is None:
            raise self.error(entries["data"][1], "data", f"empty; expected a key {CONFIG_KEY!r}")
        data_entries = self.entries(data, "data")
        if CONFIG_KEY not in data_entries:
            present = ", ".join(repr(key) for key in data_entries) or "none"
            raise self.error(data, "data", f"no key {CONFIG_KEY!r} (keys present: {present})")
        text_node = data_entries[CONFIG_KEY][1]
        text = self.string(text_node, f"data[{CONFIG_KEY!r}]")
        if isinstance(text_node, ScalarNode) and text_node.style == "|":
            # A literal block keeps its lines one for one, so errors can point into this file.
            return text, self.source, self.line(text_node)
        return text, f"{self.source} data[{CONFIG_KEY!r}]", 0

    # -- the configuration ----------------------------------------------------------------------

    def read_config(
        self,
        root: Node,
        known_plugins: Collection[str] | None,
        known_actions: Collection[str] | None,
    ) -> SchedulerConfig:
        if not isinstance(root, MappingNode):
            raise self.error(root, "", f"expected a mapping with actions and tiers, got {_describe(root)}")
        entries = self.entries(root, "")
        self.warn_unknown("", entries, _TOP_LEVEL_KEYS)
        if "actions" not in entries:
            raise self.error(root, "actions", 'missing; expected a string such as "enqueue, allocate, backfill"')
        actions = self.read_actions(entries["actions"][1], known_actions)
        tiers = self.read_tiers(entries["tiers"][1]) if "tiers" in entries else []
        self.check_plugins(tiers, known_plugins)
        configurations = (
            self.read_configurations(entries["configurations"][1], known_actions) if "configurations" in entries else {}
        )
        metrics = self.read_metrics(entries["metrics"][1]) if "metrics" in entries else {}
        return SchedulerConfig(
            actions=actions,
            tiers=tuple(Tier(tuple(option for option, _ in tier)) for tier in tiers),
            configurations=configurations,
            metrics=metrics,
        )

    def read_actions(self, node: Node, known_actions: Collection[str] | None) -> tuple[str, ...]:
        path = "actions"
        if isinstance(node, ScalarNode) and node.tag == _STR_TAG:
            names = [part.strip() for part in str(node.value).split(",")]
        elif isinstance(node, SequenceNode):
            names = [self.string(item, f"{path}[{index}]").strip() for index, item in enumerate(node.value)]
        else:
            raise self.error(
                node, path, f'expected a string such as "enqueue, allocate, backfill", got {_describe(node)}'
            )
        if not any(names):
            raise self.error(node, path, "no actions listed")
        if not all(names):
            raise self.error(node, path, f"empty action name in {node.value!r}")
        if known_actions is not None:
            unknown = [name for name in names if name not in known_actions]
            if unknown:
                raise self.error(
                    node,
                    path,
                    f"unknown action{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(repr(name) for name in unknown)}; "
                    f"known actions: {', '.join(sorted(known_actions))}",
                )
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            self.warn(node, path, f"action(s) {', '.join(map(repr, repeated))} listed more than once")
        return tuple(names)

    def read_tiers(self, node: Node) -> list[list[tuple[PluginOption, Node]]]:
        tiers_node = self.sequence(node, "tiers", "a list of tiers (- plugins: [...])")
        if tiers_node is None:
            return []
        tiers: list[list[tuple[PluginOption, Node]]] = []
        for tier_index, tier_node in enumerate(tiers_node.value):
            tier_path = f"tiers[{tier_index}]"
            mapping = self.mapping(tier_node, tier_path, "a tier (a mapping with plugins)")
            if mapping is None:
                raise self.error(tier_node, tier_path, "empty tier; expected a mapping with plugins")
            entries = self.entries(mapping, tier_path)
            self.warn_unknown(tier_path, entries, _TIER_KEYS)
            plugins_node = entries.get("plugins", (mapping, None))[1]
            plugins = (
                None
                if plugins_node is None
                else self.sequence(plugins_node, f"{tier_path}.plugins", "a list of plugins")
            )
            if plugins is None or not plugins.value:
                self.warn(mapping, tier_path, "tier has no plugins")
                tiers.append([])
                continue
            tiers.append(
                [
                    (self.read_plugin(plugin_node, f"{tier_path}.plugins[{index}]"), plugin_node)
                    for index, plugin_node in enumerate(plugins.value)
                ]
            )
        return tiers

    def read_plugin(self, node: Node, path: str) -> PluginOption:
        mapping = self.mapping(node, path, "a plugin (a mapping with a name)")
        if mapping is None:
            raise self.error(node, path, "empty plugin entry; expected a mapping with a name")
        entries = self.entries(mapping, path)
        self.warn_unknown(path, entries, _PLUGIN_KEYS)
        if "name" not in entries:
            raise self.error(mapping, f"{path}.name", "missing; every plugin needs a name")
        name = self.string(entries["name"][1], f"{path}.name")
        if not name.strip():
            raise self.error(entries["name"][1], f"{path}.name", "empty plugin name")
        arguments = self.read_arguments(entries["arguments"][1], f"{path}.arguments") if "arguments" in entries else {}
        # Only flags the file sets are kept: PluginOption.is_enabled treats the rest as enabled.
        flags: dict[str, bool] = {}
        for flag_key, point in _POINT_BY_FLAG_KEY.items():
            if flag_key in entries:
                value = self.read_flag(entries[flag_key][1], f"{path}.{flag_key}")
                if value is not None:
                    flags[point] = value
        return PluginOption(name=name, arguments=arguments, flags=flags)

    def read_flag(self, node: Node, path: str) -> bool | None:
        if isinstance(node, ScalarNode) and node.tag == _NULL_TAG:
            # Volcano decodes an empty flag as unset, and unset means enabled.
            return None
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:bool":
            return bool(self.value(node, path))
        raise self.error(node, path, f"expected true or false, got {_describe(node)}")

    def read_arguments(self, node: Node, path: str) -> dict[str, Any]:
        mapping = self.mapping(node, path, "a mapping of argument names to values")
        if mapping is None:
            return {}
        entries = self.entries(mapping, path)
        return {key: self.value(value_node, f"{path}.{key}") for key, (_, value_node) in entries.items()}

    def check_plugins(
        self, tiers: list[list[tuple[PluginOption, Node]]], known_plugins: Collection[str] | None
    ) -> None:
        """Duplicate names, Volcano's drf/proportion conflict, then unknown names (all listed at once)."""
        seen: dict[str, tuple[str, Node]] = {}
        unknown: list[tuple[str, str, Node]] = []
        for tier_index, tier in enumerate(tiers):
            for plugin_index, (option, node) in enumerate(tier):
                path = f"tiers[{tier_index}].plugins[{plugin_index}]"
                if option.name in seen:
                    first_path, first_node = seen[option.name]
                    raise self.error(
                        node,
                        f"{path}.name",
                        f"plugin {option.name!r} is configured twice "
                        f"(first at {first_path}, line {self.line(first_node)})",
                    )
                seen[option.name] = (path, node)
                if known_plugins is not None and option.name not in known_plugins:
                    unknown.append((option.name, path, node))
            by_name = {option.name: option for option, _ in tier}
            drf = by_name.get("drf")
            if drf is not None and "proportion" in by_name and drf.flags.get("hierarchy") is True:
                raise self.error(
                    seen["drf"][1],
                    f"tiers[{tier_index}]",
                    "proportion and drf with enableHierarchy: true conflict; use one or the other",
                )
        if unknown and known_plugins is not None:
            _, path, node = unknown[0]
            names = ", ".join(repr(name) for name, _, _ in unknown)
            raise self.error(
                node,
                f"{path}.name",
                f"unknown plugin{'s' if len(unknown) > 1 else ''} {names}; "
                f"known plugins: {', '.join(sorted(known_plugins))}",
            )
        if isinstance(known_plugins, PluginArgumentChecker):
            self.check_plugin_arguments(tiers, known_plugins)

    def check_plugin_arguments(
        self, tiers: list[list[tuple[PluginOption, Node]]], checker: PluginArgumentChecker
    ) -> None:
        """Build-check every plugin's arguments; the first problem refuses the configuration."""
        for tier_index, tier in enumerate(tiers):
            for plugin_index, (option, node) in enumerate(tier):
                problem = checker.plugin_argument_problem(option.name, option.arguments)
                if problem is None:
                    continue
                key, detail = problem
                path = f"tiers[{tier_index}].plugins[{plugin_index}].arguments"
                where = self.argument_node(node, key)
                raise self.error(where, f"{path}.{key}" if key else path, f"plugin {option.name}: {detail}")

    def argument_node(self, plugin_node: Node, key: str) -> Node:
        """The node of argument `key` in a plugin entry (for its line), else the closest enclosing one."""
        if not isinstance(plugin_node, MappingNode):
            return plugin_node
        arguments = self.entries(plugin_node, "").get("arguments")
        if arguments is None:
            return plugin_node
        if not isinstance(arguments[1], MappingNode):
            return arguments[0]
        argument = self.entries(arguments[1], "").get(key)
        return arguments[0] if argument is None else argument[1]

    def read_configurations(self, node: Node, known_actions: Collection[str] | None) -> dict[str, dict[str, Any]]:
        sequence = self.sequence(node, "configurations", "a list of {name, arguments}")
        if sequence is None:
            return {}
        configurations: dict[str, dict[str, Any]] = {}
        first_line: dict[str, int] = {}
        for index, item in enumerate(sequence.value):
            path = f"configurations[{index}]"
            mapping = self.mapping(item, path, "a mapping with name and arguments")
            if mapping is None:
                raise self.error(item, path, "empty entry; expected a mapping with name and arguments")
            entries = self.entries(mapping, path)
            self.warn_unknown(path, entries, _CONFIGURATION_KEYS)
            if "name" not in entries:
                raise self.error(mapping, f"{path}.name", "missing; name the action these arguments are for")
            name_node = entries["name"][1]
            name = self.string(name_node, f"{path}.name")
            if name in configurations:
                raise self.error(
                    name_node, f"{path}.name", f"{name!r} is configured twice (first on line {first_line[name]})"
                )
            if known_actions is not None and name not in known_actions:
                self.warn(
                    name_node,
                    f"{path}.name",
                    f"{name!r} is not a known action (known: {', '.join(sorted(known_actions))}); ignored",
                )
            arguments = (
                self.read_arguments(entries["arguments"][1], f"{path}.arguments") if "arguments" in entries else {}
            )
            configurations[name] = arguments
            first_line[name] = self.line(name_node)
        return configurations

    def read_metrics(self, node: Node) -> dict[str, str]:
        mapping = self.mapping(node, "metrics", "a mapping of strings")
        if mapping is None:
            return {}
        metrics: dict[str, str] = {}
        for key, (_, value_node) in self.entries(mapping, "metrics").items():
            if not isinstance(value_node, ScalarNode):
                raise self.error(value_node, f"metrics.{key}", f"expected a string, got {_describe(value_node)}")
            # Volcano's map[string]string takes any scalar by its text; null is the empty string.
            metrics[key] = "" if value_node.tag == _NULL_TAG else str(value_node.value)
        return metrics
