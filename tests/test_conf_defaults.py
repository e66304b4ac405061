"""The built-in default configuration."""

from __future__ import annotations

from numasched.conf.defaults import DEFAULT_CONFIG_TEXT, default_config
from numasched.conf.loader import load_config_text
from numasched.conf.model import FLAG_KEYS


def test_default_actions_and_tiers() -> None:
    config = default_config()
    assert config.actions == ("enqueue", "allocate", "backfill")
    assert [[plugin.name for plugin in tier.plugins] for tier in config.tiers] == [
        ["priority", "gang", "conformance"],
        ["predicates", "nodeorder", "binpack", "dra", "numa-aware"],
    ]
    numa_aware = config.tiers[1].plugins[4]
    assert numa_aware.arguments == {"weight": 10}


def test_default_plugins_have_every_point_enabled() -> None:
    for tier in default_config().tiers:
        for plugin in tier.plugins:
            assert all(plugin.is_enabled(point) for point in FLAG_KEYS), plugin.name


def test_default_config_is_a_fresh_object_each_call() -> None:
    first = default_config()
    first.tiers[1].plugins[4].arguments["weight"] = 1
    assert default_config().tiers[1].plugins[4].arguments == {"weight": 10}


def test_default_text_passes_a_registry_check_of_its_own_names() -> None:
    names = default_config().plugin_names()
    config = load_config_text(DEFAULT_CONFIG_TEXT, "defaults", names, ["enqueue", "allocate", "backfill"])
    assert config == default_config()
