"""Hot reload: the configuration in force is the last one that loaded cleanly.

A ConfigSource holds that last good configuration. New text (from the watched file, or from the
ConfigMap watch on the Kubernetes side) goes through reload_text, which swaps only when the text
loads; otherwise the old configuration stays and the error is returned and logged.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskStatus

from numasched.conf.loader import (
    DEFAULT_SOURCE_NAME,
    ConfigError,
    WarningSink,
    load_config_text,
    read_config_file,
)
from numasched.conf.model import SchedulerConfig

DEFAULT_POLL_INTERVAL_S = 5.0

_log = structlog.get_logger("numasched.conf")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ConfigSource:
    """The configuration in force and the means to replace it."""

    def __init__(
        self,
        initial: SchedulerConfig,
        *,
        known_plugins: Collection[str] | None = None,
        known_actions: Collection[str] | None = None,
        source_name: str = DEFAULT_SOURCE_NAME,
        initial_text: str | None = None,
        on_warning: WarningSink | None = None,
    ) -> None:
        self._config = initial
        self._known_plugins = known_plugins
        self._known_actions = known_actions
        self._source_name = source_name
        self._on_warning = on_warning
        # Text offered last, good or bad: offering it again changes nothing and logs nothing.
        self._offered_digest = None if initial_text is None else _digest(initial_text)
        self._last_error: ConfigError | None = None
        self._generation = 0

    @classmethod
    def from_text(
        cls,
        text: str,
        source_name: str = DEFAULT_SOURCE_NAME,
        known_plugins: Collection[str] | None = None,
        known_actions: Collection[str] | None = None,
        *,
        on_warning: WarningSink | None = None,
    ) -> ConfigSource:
        """A source whose first configuration is text; raises ConfigError when it does not load."""
        config = load_config_text(text, source_name, known_plugins, known_actions, on_warning=on_warning)
        return cls(
            config,
            known_plugins=known_plugins,
            known_actions=known_actions,
            source_name=source_name,
            initial_text=text,
            on_warning=on_warning,
        )

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        known_plugins: Collection[str] | None = None,
        known_actions: Collection[str] | None = None,
        *,
        on_warning: WarningSink | None = None,
    ) -> ConfigSource:
        return cls.from_text(read_config_file(path), str(path), known_plugins, known_actions, on_warning=on_warning)

    def current(self) -> SchedulerConfig:
        return self._config

    @property
    def generation(self) -> int:
        """How many times the configuration was replaced; lets a loop notice a change cheaply."""
        return self._generation

    @property
    def last_error(self) -> ConfigError | None:
        """Why the last offered text was refused; None once a text loads."""
        return self._last_error

    def reload_text(self, text: str, source_name: str | None = None) -> ConfigError | None:
        """Load text and put it in force; on failure keep the current configuration.

        Returns the error, or None when the text is in force (including when it was already).
        """
        source = source_name or self._source_name
        digest = _digest(text)
        if digest == self._offered_digest:
            return self._last_error
        self._offered_digest = digest
        try:
            config = load_config_text(
                text, source, self._known_plugins, self._known_actions, on_warning=self._on_warning
            )
        except ConfigError as error:
            self._last_error = error
            _log.warning("invalid config, keeping last good", source=source, error=str(error))
            return error
        self._last_error = None
        if config == self._config:
            return None
        self._config = config
        self._generation += 1
        _log.info(
            "config reloaded",
            source=source,
            actions=",".join(config.actions),
            plugins=",".join(config.plugin_names()),
            generation=self._generation,
        )
        return None


def _file_identity(stat: os.stat_result) -> tuple[int, int, int]:
    # A ConfigMap volume swaps a symlink, which changes the inode; editors change mtime or size.
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


async def watch_config_file(
    source: ConfigSource,
    path: str | Path,
    *,
    interval: float = DEFAULT_POLL_INTERVAL_S,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Poll path every interval seconds and hand changed content to source.reload_text.

    Runs until cancelled. A file that disappears or cannot be read is logged once per distinct
    problem; the configuration in force stays.
    """
    if interval <= 0:
        raise ValueError(f"config poll interval must be positive, got {interval}")
    watched = anyio.Path(path)
    name = str(path)
    seen_identity: tuple[int, int, int] | None = None
    reported_problem = ""
    task_status.started()
    while True:
        problem = ""
        try:
            identity = _file_identity(await watched.stat())
            if identity != seen_identity:
                text = await watched.read_text(encoding="utf-8")
                seen_identity = identity
                source.reload_text(text, name)
        except UnicodeDecodeError as error:
            problem = f"not UTF-8 text ({error.reason} at byte {error.start})"
        except OSError as error:
            problem = f"cannot read the file: {error.strerror or error}"
        if problem:
            seen_identity = None
            if problem != reported_problem:
                _log.warning("config file unreadable, keeping last good", source=name, error=problem)
        reported_problem = problem
        await anyio.sleep(interval)
