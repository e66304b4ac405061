"""Registry (built-ins, entry points, unknown names) and plugin Arguments."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError
from numasched.scheduler.framework.registry import (
    ACTION_GROUP,
    HINT_PROVIDER_GROUP,
    PLUGIN_GROUP,
    Registry,
    UnknownActionError,
    UnknownPluginError,
)


def test_default_registry_knows_the_builtins() -> None:
    registry = default_registry()
    plugins = registry.known_plugin_names()
    for name in ("priority", "gang", "conformance", "predicates", "nodeorder", "binpack", "numa-aware", "drf"):
        assert name in plugins
    assert registry.known_action_names() == [
        "allocate",
        "backfill",
        "enqueue",
        "gangpreempt",
        "gangreclaim",
        "preempt",
        "reclaim",
        "shuffle",
    ]
    assert registry.build_plugin("gang").name == "gang"


def test_unknown_names_are_reported_with_the_known_ones() -> None:
    registry = Registry()
    registry.register_plugin("gang", lambda arguments: pytest.fail("not built"))
    with pytest.raises(UnknownPluginError) as caught:
        registry.plugin("gnag")
    assert caught.value.name == "gnag"
    assert str(caught.value) == "unknown plugin 'gnag'; known plugins: gang"
    with pytest.raises(UnknownActionError, match=r"unknown action 'preempt'; known actions: \(none\)"):
        registry.action("preempt")


def test_registering_a_name_twice_is_refused_unless_replacing() -> None:
    registry = default_registry()
    with pytest.raises(ValueError, match="plugin 'gang' is already registered"):
        registry.register_plugin("gang", lambda arguments: registry.build_plugin("priority"))
    registry.register_plugin("gang", lambda arguments: registry.build_plugin("priority"), replace=True)
    assert registry.build_plugin("gang").name == "priority"


def _install_distribution(root: Path, module_source: str, entry_points: str) -> None:
    (root / "acme_sched_ext.py").write_text(textwrap.dedent(module_source))
    dist_info = root / "acme_sched_ext-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sched-ext\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


EXTENSION = """
    class SpreadPlugin:
        def __init__(self, arguments):
            self.name = "acme-spread"
            self.weight = arguments.get_int("weight", 1)

        def on_session_open(self, ssn):
            ssn.add_node_order_fn(self.name, lambda task, node: float(self.weight))

        def on_session_close(self, ssn):
            pass

    class Noop:
        name = "whatever"

        def execute(self, ssn):
            ssn.acme_ran = True

    def gpu_hints(arguments):
        return "acme hint provider"

    not_callable = 42
"""


def test_entry_points_register_plugins_actions_and_hint_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_distribution(
        tmp_path,
        EXTENSION,
        f"""
        [{PLUGIN_GROUP}]
        acme-spread = acme_sched_ext:SpreadPlugin
        gang = acme_sched_ext:SpreadPlugin
        broken = acme_sched_ext_missing:Thing
        [{ACTION_GROUP}]
        acme-noop = acme_sched_ext:Noop
        acme-bad = acme_sched_ext:not_callable
        [{HINT_PROVIDER_GROUP}]
        acme-gpu = acme_sched_ext:gpu_hints
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_sched_ext", raising=False)
    registry = default_registry()
    problems = registry.load_entry_points()

    plugin = registry.build_plugin("acme-spread", Arguments({"weight": 7}, plugin="acme-spread"))
    assert plugin.name == "acme-spread"
    assert vars(plugin)["weight"] == 7
    assert registry.build_plugin("gang").name == "gang"  # a built-in is never replaced
    assert registry.action("acme-noop").name == "acme-noop"
    assert registry.hint_provider("acme-gpu")(Arguments()) == "acme hint provider"
    assert "acme-noop" in registry.known_action_names()
    assert "acme-gpu" in registry.known_hint_provider_names()
    assert sorted(problem.split(": ")[0] for problem in problems) == [
        f"entry point acme-bad = acme_sched_ext:not_callable in group {ACTION_GROUP}",
        f"entry point broken = acme_sched_ext_missing:Thing in group {PLUGIN_GROUP}",
        f"entry point gang = acme_sched_ext:SpreadPlugin in group {PLUGIN_GROUP}",
    ]
    assert any("plugin 'gang' is already registered" in problem for problem in problems)
    assert any("ModuleNotFoundError" in problem for problem in problems)


def test_default_registry_can_load_entry_points_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_distribution(tmp_path, EXTENSION, f"[{PLUGIN_GROUP}]\nacme-spread = acme_sched_ext:SpreadPlugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "acme-spread" not in default_registry().known_plugin_names()
    assert "acme-spread" in default_registry(with_entry_points=True).known_plugin_names()


# --- arguments -----------------------------------------------------------------------------------


def test_arguments_typed_getters() -> None:
    arguments = Arguments(
        {
            "weight": 10,
            "ratio": "0.5",
            "count": "3",
            "whole": 4.0,
            "on": "True",
            "off": False,
            "names": "a, b ,,c",
            "items": ["x", 1],
            "label": 5,
            "nested": {"cpu": 1},
        },
        plugin="numa-aware",
    )
    assert arguments.get_int("weight", 1) == 10
    assert arguments.get_int("count", 1) == 3
    assert arguments.get_int("whole", 1) == 4
    assert arguments.get_int("missing", 9) == 9
    assert arguments.get_float("ratio", 1.0) == 0.5
    assert arguments.get_float("weight", 1.0) == 10.0
    assert arguments.get_bool("on", False) is True
    assert arguments.get_bool("off", True) is False
    assert arguments.get_list("names", []) == ["a", "b", "c"]
    assert arguments.get_list("items", []) == ["x", "1"]
    assert arguments.get_str("label", "") == "5"
    assert arguments.get_mapping("nested") == {"cpu": 1}
    assert dict(arguments)["weight"] == 10
    assert len(arguments) == 10


@pytest.mark.parametrize(
    ("key", "read"),
    [
        ("weight", lambda arguments: arguments.get_int("weight", 1)),
        ("flag", lambda arguments: arguments.get_bool("flag", True)),
        ("ratio", lambda arguments: arguments.get_float("ratio", 0.25)),
        ("names", lambda arguments: arguments.get_list("names", ["d"])),
        ("label", lambda arguments: arguments.get_str("label", "none")),
        ("nested", lambda arguments: arguments.get_mapping("nested", {"k": 1})),
        ("flag", lambda arguments: arguments.get_int("flag", 2)),
    ],
)
def test_an_argument_of_the_wrong_type_is_an_error_naming_plugin_and_key(
    key: str, read: Callable[[Arguments], object]
) -> None:
    # A wrong type is a configuration error, never a silent fall back to the default.
    arguments = Arguments(
        {"weight": "heavy", "flag": "perhaps", "ratio": True, "names": {"a": 1}, "label": ["x"], "nested": 3},
        plugin="binpack",
    )
    with pytest.raises(PluginArgumentError) as raised:
        read(arguments)
    assert (raised.value.plugin, raised.value.key) == ("binpack", key)
    assert str(raised.value).startswith(f"plugin binpack: argument {key}: expected ")


def test_volcano_noop_actions_are_accepted_and_warn_once(capsys: pytest.CaptureFixture[str]) -> None:
    from numasched.plugins.accepted_noops import AcceptedNoopAction, WarnOnce

    registry = default_registry()
    action = registry.action("shuffle")
    assert isinstance(action, AcceptedNoopAction)
    warnings = WarnOnce()
    assert warnings.warn("preempt", kind="action") is True
    assert warnings.warn("preempt", kind="action") is False
    # A plugin and an action of the same name are warned about separately.
    assert warnings.warn("preempt") is True
