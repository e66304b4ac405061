"""A plugin's `arguments` mapping, read with typed getters.

A value of the wrong type or form is a configuration error (PluginArgumentError, naming the plugin
and the argument), never a silent fallback to the default: a typo such as `devices: 42` would
otherwise turn a feature off while the scheduler reports a healthy configuration. An argument
that is absent takes the default.

The configuration loader builds every configured plugin once when a configuration is loaded (see
numasched.scheduler.framework.registry.PluginCatalog), so the error refuses the configuration there: at
startup the scheduler exits with its configuration-error code, on reload the last good
configuration stays in force.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})

# How much of an offending value a message quotes: enough to recognise it, never a whole blob.
_QUOTED_VALUE_CHARS = 80


def quote_value(value: object) -> str:
    """repr(value), cut short for messages."""
    text = repr(value)
    if len(text) <= _QUOTED_VALUE_CHARS:
        return text
    return text[: _QUOTED_VALUE_CHARS - 3] + "..."


class PluginArgumentError(ValueError):
    """A plugin argument that cannot be used: a configuration error naming plugin and argument.

    Plugins raise it for their own checks too (a value of the right type but out of range, an
    unknown policy name): `raise PluginArgumentError(plugin, key, "expected one of ..., got 'x'")`,
    or `arguments.invalid(key, "...")`.
    """

    def __init__(self, plugin: str, key: str, detail: str) -> None:
        self.plugin = plugin
        self.key = key
        self.detail = detail
        super().__init__(f"plugin {plugin or '(unnamed)'}: argument {key}: {detail}")


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

    def invalid(self, key: str, detail: str) -> PluginArgumentError:
        """The error for argument `key` of this plugin, for a plugin's own checks to raise."""
        return PluginArgumentError(self.plugin, key, detail)

    def _wrong(self, key: str, expected: str) -> PluginArgumentError:
        return self.invalid(key, f"expected {expected}, got {quote_value(self._values.get(key))}")

    def get_int(self, key: str, default: int) -> int:
        """An integer: a YAML integer, a float with no fraction, or a string of digits ("8")."""
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, bool):
            raise self._wrong(key, "an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise self._wrong(key, "an integer")

    def get_float(self, key: str, default: float) -> float:
        """A finite number: a YAML integer or float, or a string holding one."""
        if key not in self._values:
            return default
        value = self._values[key]
        number: float | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int | float):
            try:
                number = float(value)
            except OverflowError:
                number = None
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or number != number or number in (float("inf"), float("-inf")):
            raise self._wrong(key, "a finite number")
        return number

    def get_bool(self, key: str, default: bool) -> bool:
        """true/false, or one of the words yes/no, on/off, 1/0 as a string."""
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
        raise self._wrong(key, "true or false")

    def get_str(self, key: str, default: str) -> str:
        """A string; a YAML number is taken as its text (`version: 2` reads "2")."""
        if key not in self._values:
            return default
        value = self._values[key]
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise self._wrong(key, "a string")

    def get_list(self, key: str, default: list[str]) -> list[str]:
        """A YAML list of strings (numbers taken as their text), or a comma-separated string ("a, b")."""
        if key not in self._values:
            return list(default)
        value = self._values[key]
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list | tuple) and all(
            isinstance(item, str | int | float) and not isinstance(item, bool) for item in value
        ):
            return [str(item) for item in value]
        raise self._wrong(key, "a list of strings")

    def get_mapping(self, key: str, default: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A mapping with string keys."""
        if key not in self._values:
            return dict(default or {})
        value = self._values[key]
        if isinstance(value, Mapping) and all(isinstance(name, str) for name in value):
            return dict(value)
        raise self._wrong(key, "a mapping with string keys")
