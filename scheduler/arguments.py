"""A plugin's `arguments` mapping, read with typed getters that never fail on a bad value.

A bad value is logged with the plugin and key, and the default is used, so one typo in the
ConfigMap degrades one knob instead of stopping the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import structlog

_log = structlog.get_logger(__name__)

_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})


class Arguments(Mapping[str, Any]):
    def __init__(self, values: Mapping[str, Any] | None = None, *, plugin: str = "") -> None:
        self._values: dict[str, Any] = dict(values or {})
        self.plugin = plugin

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Arguments({self._values!r}, plugin={self.plugin!r})"

    def _bad(self, key: str, expected: str, default: object) -> None:
        _log.warning(
            "bad plugin argument, using the default",
            plugin=self.plugin,
            key=key,
            value=repr(self._values.get(key)),
            expected=expected,
            default=default,
        )

    def get_int(self, key: str, default: int) -> int:
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, bool):
            self._bad(key, "an integer", default)
            return default
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        self._bad(key, "an integer", default)
        return default

    def get_float(self, key: str, default: float) -> float:
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, bool):
            self._bad(key, "a number", default)
            return default
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        self._bad(key, "a number", default)
        return default

    def get_bool(self, key: str, default: bool) -> bool:
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
        self._bad(key, "true or false", default)
        return default

    def get_str(self, key: str, default: str) -> str:
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        self._bad(key, "a string", default)
        return default

    def get_list(self, key: str, default: list[str]) -> list[str]:
        """A YAML list, or a comma-separated string ("a, b")."""
        if key not in self._values:
            return list(default)
        value = self._values[key]
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list | tuple) and all(isinstance(item, str | int | float) for item in value):
            return [str(item) for item in value]
        self._bad(key, "a list of strings", default)
        return list(default)

    def get_mapping(self, key: str, default: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if key not in self._values:
            return dict(default or {})
        value = self._values[key]
        if isinstance(value, Mapping) and all(isinstance(name, str) for name in value):
            return dict(value)
        self._bad(key, "a mapping", default)
        return dict(default or {})
