"""Plugin arguments of the wrong type: a configuration error naming plugin and argument.

The getters raise PluginArgumentError; the loader, given the registry's plugin catalog, builds
every configured plugin while loading, so the error refuses the whole configuration with the
file, line and field path, at startup and on reload (where the last good configuration stays).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.conf.loader import ConfigError, load_config_text
from numasched.conf.watch import ConfigSource
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError
from numasched.scheduler.framework.plugin import Plugin
from numasched.scheduler.framework.registry import Registry

GOOD = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: gang
  - name: nodeorder
    arguments:
      leastrequested.weight: 2
"""


def config_with(plugin: str, arguments: str) -> str:
    """A configuration whose second plugin is `plugin` with the YAML argument lines given."""
    lines = "".join(f"      {line}\n" for line in arguments.splitlines())
    head = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n'
    return f"{head}  - name: {plugin}\n    arguments:\n{lines}"


def load_error(text: str, registry: Registry | None = None) -> ConfigError:
    registry = registry or default_registry()
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "test.conf", registry.known_plugin_names(), registry.known_action_names())
    return caught.value


# --- the getters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("getter", "value", "expected"),
    [
        ("get_int", "heavy", "expected an integer, got 'heavy'"),
        ("get_int", True, "expected an integer, got True"),
        ("get_int", 1.5, "expected an integer, got 1.5"),
        ("get_int", [1], "expected an integer, got [1]"),
        ("get_float", True, "expected a finite number, got True"),
        ("get_float", "fast", "expected a finite number, got 'fast'"),
        ("get_float", float("nan"), "expected a finite number, got nan"),
        ("get_float", "inf", "expected a finite number, got 'inf'"),
        ("get_float", 10**400, "expected a finite number"),
        ("get_bool", "perhaps", "expected true or false, got 'perhaps'"),
        ("get_bool", 2, "expected true or false, got 2"),
        ("get_str", ["x"], "expected a string, got ['x']"),
        ("get_str", None, "expected a string, got None"),
        ("get_list", 42, "expected a list of strings, got 42"),
        ("get_list", {"a": 1}, "expected a list of strings, got {'a': 1}"),
        ("get_list", ["a", True], "expected a list of strings, got ['a', True]"),
        ("get_list", ["a", ["b"]], "expected a list of strings"),
        ("get_mapping", 3, "expected a mapping with string keys, got 3"),
        ("get_mapping", {1: "a"}, "expected a mapping with string keys, got {1: 'a'}"),
    ],
)
def test_a_wrong_value_raises_naming_plugin_and_argument(getter: str, value: object, expected: str) -> None:
    arguments = Arguments({"knob": value}, plugin="acme")
    defaults: dict[str, Any] = {
        "get_int": 1,
        "get_float": 1.0,
        "get_bool": True,
        "get_str": "d",
        "get_list": ["d"],
        "get_mapping": {"d": 1},
    }
    with pytest.raises(PluginArgumentError) as caught:
        getattr(arguments, getter)("knob", defaults[getter])
    error = caught.value
    assert (error.plugin, error.key) == ("acme", "knob")
    assert expected in error.detail
    assert str(error).startswith("plugin acme: argument knob: expected ")
    assert isinstance(error, ValueError)


def test_absent_arguments_take_the_default_and_good_ones_are_read() -> None:
    arguments = Arguments(
        {"count": "3", "whole": 4.0, "ratio": "0.5", "on": "Yes", "names": "a, b,,c", "items": ["x", 1], "label": 5},
        plugin="acme",
    )
    assert arguments.get_int("missing", 9) == 9
    assert arguments.get_list("missing", ["d"]) == ["d"]
    assert arguments.get_int("count", 1) == 3
    assert arguments.get_int("whole", 1) == 4
    assert arguments.get_float("ratio", 1.0) == 0.5
    assert arguments.get_bool("on", False) is True
    assert arguments.get_list("names", []) == ["a", "b", "c"]
    assert arguments.get_list("items", []) == ["x", "1"]
    assert arguments.get_str("label", "") == "5"


def test_a_long_value_is_quoted_short() -> None:
    with pytest.raises(PluginArgumentError) as caught:
        Arguments({"knob": "x" * 10_000}, plugin="acme").get_int("knob", 1)
    assert len(str(caught.value)) < 200
    assert str(caught.value).endswith("...")


# --- the loader refuses the configuration ---------------------------------------------------------


@pytest.mark.parametrize(
    ("plugin", "arguments", "line", "path", "needle"),
    [
        # devices: 42 used to turn GPU alignment off with a log line.
        ("numa-aware", "weight: 2\ndevices: 42", 8, "tiers[0].plugins[1].arguments.devices", "a list of strings"),
        ("numa-aware", "weight: heavy", 7, "tiers[0].plugins[1].arguments.weight", "an integer, got 'heavy'"),
        ("nodeorder", "mostrequested.weight: [1]", 7, "tiers[0].plugins[1].arguments.mostrequested.weight", "integer"),
        ("binpack", "binpack.weight: true", 7, "tiers[0].plugins[1].arguments.binpack.weight", "an integer, got True"),
    ],
)
def test_a_wrong_plugin_argument_refuses_the_configuration(
    plugin: str, arguments: str, line: int, path: str, needle: str
) -> None:
    error = load_error(config_with(plugin, arguments))
    assert error.source == "test.conf"
    assert error.line == line
    assert error.path == path
    assert error.detail.startswith(f"plugin {plugin}: ")
    assert needle in error.detail


def test_good_arguments_load() -> None:
    registry = default_registry()
    config = load_config_text(
        config_with("numa-aware", "weight: 2\ndevices: [nvidia.com/gpu]"),
        "test.conf",
        registry.known_plugin_names(),
        registry.known_action_names(),
    )
    assert config.plugin_names() == ["gang", "numa-aware"]


def test_a_plain_name_list_does_not_check_arguments() -> None:
    # A pure parse (names only) cannot build plugins: the arguments are kept as written.
    config = load_config_text(config_with("numa-aware", "devices: 42"), "test.conf", ["gang", "numa-aware"], None)
    assert config.tiers[0].plugins[1].arguments == {"devices": 42}


class _Fussy:
    name = "fussy"

    def __init__(self, arguments: Arguments) -> None:
        if arguments.get_str("mode", "fast") not in ("fast", "slow"):
            raise arguments.invalid("mode", f"expected fast or slow, got {arguments['mode']!r}")


def _broken(arguments: Arguments) -> Plugin:
    raise RuntimeError("no GPU library")


def test_a_third_party_plugin_check_and_failure_refuse_the_configuration() -> None:
    registry = default_registry()
    registry.register_plugin("fussy", _Fussy)  # type: ignore[arg-type]  # builds, registers nothing
    registry.register_plugin("broken", _broken)
    error = load_error(config_with("fussy", "mode: medium"), registry)
    assert (error.line, error.path) == (7, "tiers[0].plugins[1].arguments.mode")
    assert error.detail == "plugin fussy: expected fast or slow, got 'medium'"
    error = load_error(config_with("broken", "x: 1"), registry)
    assert (error.line, error.path) == (6, "tiers[0].plugins[1].arguments")  # the arguments: line
    assert error.detail == "plugin broken: cannot be built: RuntimeError: no GPU library"


def test_a_noop_plugin_accepts_any_arguments() -> None:
    registry = default_registry()
    config = load_config_text(
        config_with("drf", "anything: [1, 2]"), "t", registry.known_plugin_names(), registry.known_action_names()
    )
    assert "drf" in config.plugin_names()


# --- startup and reload ---------------------------------------------------------------------------


def test_reload_with_a_wrong_argument_keeps_the_last_good_configuration() -> None:
    registry = default_registry()
    source = ConfigSource.from_text(GOOD, "cm", registry.known_plugin_names(), registry.known_action_names())
    before = source.current()
    error = source.reload_text(config_with("nodeorder", "leastrequested.weight: heavy"))
    assert isinstance(error, ConfigError)
    assert error.path == "tiers[0].plugins[1].arguments.leastrequested.weight"
    assert source.current() is before
    assert source.last_error is error
    assert source.reload_text(config_with("nodeorder", "leastrequested.weight: 3")) is None
    assert source.current().tiers[0].plugins[1].arguments == {"leastrequested.weight": 3}


def test_a_first_configuration_with_a_wrong_argument_is_refused() -> None:
    registry = default_registry()
    with pytest.raises(ConfigError, match=r"arguments\.devices: plugin numa-aware: expected a list of strings"):
        ConfigSource.from_text(
            config_with("numa-aware", "devices: {gpu: 1}"),
            "cm",
            registry.known_plugin_names(),
            registry.known_action_names(),
        )


def test_the_catalog_lists_and_finds_names_like_a_list() -> None:
    catalog = default_registry().known_plugin_names()
    assert list(catalog) == sorted(catalog)
    assert "numa-aware" in catalog and "nonesuch" not in catalog
    assert catalog[0] == sorted(catalog)[0]
    assert catalog.plugin_argument_problem("nonesuch", {"x": 1}) is None
    assert catalog.plugin_argument_problem("gang", {}) is None
    assert PluginArgumentError("p", "k", "d").key == "k"


# --- any value, any plugin: an answer, never an exception ------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
# Arguments the built-in plugins read, and one none reads.
_ARGUMENT_KEYS = [
    "weight",
    "devices",
    "binpack.weight",
    "binpack.resources",
    "leastrequested.weight",
    "unknown-topology",
    "hint-providers",
    "nic-alignment",
    "full-pcpus-only",
    "x",
]
_GETTERS: dict[str, tuple[Any, type | tuple[type, ...]]] = {
    "get_int": (1, int),
    "get_float": (1.0, float),
    "get_bool": (True, bool),
    "get_str": ("d", str),
    "get_list": (["d"], list),
    "get_mapping": ({"d": 1}, dict),
}


@settings(max_examples=300, deadline=None)
@given(value=_JSON, getter=st.sampled_from(sorted(_GETTERS)))
def test_a_getter_returns_its_type_or_raises_the_configuration_error(value: object, getter: str) -> None:
    default, kind = _GETTERS[getter]
    try:
        result = getattr(Arguments({"knob": value}, plugin="acme"), getter)("knob", default)
    except PluginArgumentError as error:
        assert (error.plugin, error.key) == ("acme", "knob")
        return
    assert isinstance(result, kind) and not (kind is int and isinstance(result, bool))


@settings(max_examples=150, deadline=None)
@given(
    plugin=st.sampled_from(sorted(default_registry().known_plugin_names())),
    arguments=st.dictionaries(
        st.sampled_from(_ARGUMENT_KEYS),
        _JSON,
        max_size=4,
    ),
)
def test_checking_any_arguments_of_any_plugin_never_raises(plugin: str, arguments: dict[str, Any]) -> None:
    problem = default_registry().known_plugin_names().plugin_argument_problem(plugin, arguments)
    assert problem is None or (isinstance(problem[0], str) and problem[1])
