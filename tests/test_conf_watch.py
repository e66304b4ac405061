"""Hot reload: the last good configuration stays in force."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from numasched.conf.loader import ConfigError
from numasched.conf.watch import ConfigSource, watch_config_file

PLUGINS = ("gang", "binpack", "predicates")
ACTIONS = ("enqueue", "allocate", "backfill")
GOOD = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n"
OTHER = "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: binpack\n"
BAD = "actions: allocate\ntiers:\n- plugins:\n  - name: nonesuch\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_source() -> ConfigSource:
    return ConfigSource.from_text(GOOD, "test.conf", PLUGINS, ACTIONS)


def test_reload_swaps_a_good_config() -> None:
    source = make_source()
    assert source.reload_text(OTHER) is None
    assert source.current().plugin_names() == ["binpack"]
    assert source.generation == 1
    assert source.last_error is None


def test_reload_keeps_last_good_on_error() -> None:
    source = make_source()
    before = source.current()
    error = source.reload_text(BAD)
    assert isinstance(error, ConfigError)
    assert "nonesuch" in str(error) and error.line == 4
    assert source.current() is before
    assert source.generation == 0
    assert source.last_error is error
    # A good text afterwards clears the error.
    assert source.reload_text(OTHER) is None
    assert source.last_error is None


def test_reload_rejects_unknown_action_and_bad_yaml() -> None:
    source = make_source()
    assert source.reload_text("actions: shuffle\n") is not None
    assert source.reload_text("actions: [unclosed\n") is not None
    assert source.current().plugin_names() == ["gang"]


def test_same_text_is_not_reloaded() -> None:
    source = make_source()
    assert source.reload_text(GOOD) is None
    assert source.generation == 0
    first = source.reload_text(BAD)
    assert source.reload_text(BAD) is first


def test_equivalent_text_does_not_bump_generation() -> None:
    source = make_source()
    assert source.reload_text(GOOD + "# a comment\n") is None
    assert source.generation == 0


def test_initial_bad_text_raises() -> None:
    with pytest.raises(ConfigError):
        ConfigSource.from_text(BAD, "test.conf", PLUGINS, ACTIONS)


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "volcano-scheduler.conf"
    path.write_text(GOOD)
    assert ConfigSource.from_file(path, PLUGINS, ACTIONS).current().plugin_names() == ["gang"]


async def wait_for(condition: object, timeout: float = 3.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_file_watcher_reloads_and_keeps_last_good(tmp_path: Path) -> None:
    path = tmp_path / "volcano-scheduler.conf"
    path.write_text(GOOD)
    source = ConfigSource.from_file(path, PLUGINS, ACTIONS)
    async with anyio.create_task_group() as group:
        await group.start(lambda task_status: watch_config_file(source, path, interval=0.02, task_status=task_status))
        path.write_text(OTHER)
        await wait_for(lambda: source.generation == 1)
        assert source.current().plugin_names() == ["binpack"]

        path.write_text(BAD)
        await wait_for(lambda: source.last_error is not None)
        assert source.current().plugin_names() == ["binpack"]
        assert str(path) in str(source.last_error)

        # The file vanishes (a ConfigMap volume mid-swap): the config stays, the watcher goes on.
        path.unlink()
        await anyio.sleep(0.1)
        assert source.current().plugin_names() == ["binpack"]

        path.write_text(GOOD)
        await wait_for(lambda: source.generation == 2)
        assert source.current().plugin_names() == ["gang"]
        group.cancel_scope.cancel()


@pytest.mark.anyio
async def test_file_watcher_is_cancellable_and_rejects_bad_interval(tmp_path: Path) -> None:
    path = tmp_path / "c.conf"
    path.write_text(GOOD)
    source = ConfigSource.from_file(path, PLUGINS, ACTIONS)
    with anyio.move_on_after(0.1) as scope:
        await watch_config_file(source, path, interval=0.01)
    assert scope.cancelled_caught
    with pytest.raises(ValueError, match="positive"):
        await watch_config_file(source, path, interval=0)
