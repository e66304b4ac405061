"""Plugins, actions and hint providers by name, as registered (the runtime registers the built-in
ones, numasched.scheduler.builtin), plus third-party ones published as Python entry points (never
files imported from a path). The framework itself knows none of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, overload

import structlog

from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError
from numasched.scheduler.framework.plugin import Action, ChecksHintProviders, HintProviderFactory, Plugin, PluginBuilder

_log = structlog.get_logger(__name__)

PLUGIN_GROUP = "numasched.plugins"
ACTION_GROUP = "numasched.actions"
HINT_PROVIDER_GROUP = "numasched.hint_providers"


class UnknownNameError(LookupError):
    """A plugin, action or hint provider name nothing registered; lists the names that exist."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {', '.join(known) or '(none)'}")


class UnknownPluginError(UnknownNameError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__("plugin", name, known)


class UnknownActionError(UnknownNameError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__("action", name, known)


class UnknownHintProviderError(UnknownNameError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__("hint provider", name, known)


class PluginCatalog(Sequence[str]):
    """The plugin names a registry knows (sorted), and the means to check a plugin's arguments.

    The configuration loader takes this as its list of known plugins and, because it can check
    arguments (numasched.conf.loader.PluginArgumentChecker), builds every configured plugin once
    while loading: an argument of the wrong type then refuses the configuration, naming plugin
    and argument, instead of failing every scheduling cycle later.
    """

    def __init__(
        self, builders: Mapping[str, PluginBuilder], hint_providers: Mapping[str, HintProviderFactory] | None = None
    ) -> None:
        self._builders = dict(builders)
        self._names = sorted(self._builders)
        self._hint_providers = dict(hint_providers or {})

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names[index]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._builders

    def __repr__(self) -> str:
        return f"PluginCatalog({self._names!r})"

    def plugin_argument_problem(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
        """(argument, what is wrong) when plugin `name` cannot be built from `arguments`, else None.

        The argument is "" when the builder failed for a reason it did not tie to one argument.
        Unknown names are the loader's business (it reports them with the known ones): None.
        """
        builder = self._builders.get(name)
        if builder is None:
            return None
        try:
            plugin = builder(Arguments(arguments, plugin=name))
            if isinstance(plugin, ChecksHintProviders):
                plugin.check_hint_providers(self._hint_providers)
        except PluginArgumentError as error:
            return error.key, error.detail
        except Exception as error:  # any builder, third-party ones included: the configuration is refused
            return "", f"cannot be built: {type(error).__name__}: {error}"
        return None


class Registry:
    def __init__(self) -> None:
        self._plugins: dict[str, PluginBuilder] = {}
        self._actions: dict[str, Action] = {}
        self._hint_providers: dict[str, HintProviderFactory] = {}

    # -- registration ----------------------------------------------------------------------------

    def register_plugin(self, name: str, builder: PluginBuilder, *, replace: bool = False) -> None:
        if name in self._plugins and not replace:
            raise ValueError(f"plugin {name!r} is already registered")
        self._plugins[name] = builder

    def register_action(self, name: str, action: Action, *, replace: bool = False) -> None:
        if name in self._actions and not replace:
            raise ValueError(f"action {name!r} is already registered")
        self._actions[name] = action

    def register_hint_provider(self, name: str, factory: HintProviderFactory, *, replace: bool = False) -> None:
        if name in self._hint_providers and not replace:
            raise ValueError(f"hint provider {name!r} is already registered")
        self._hint_providers[name] = factory

    # -- lookup ----------------------------------------------------------------------------------

    def plugin(self, name: str) -> PluginBuilder:
        builder = self._plugins.get(name)
        if builder is None:
            raise UnknownPluginError(name, list(self.known_plugin_names()))
        return builder

    def build_plugin(self, name: str, arguments: Arguments | None = None) -> Plugin:
        return self.plugin(name)(arguments if arguments is not None else Arguments(plugin=name))

    def action(self, name: str) -> Action:
        action = self._actions.get(name)
        if action is None:
            raise UnknownActionError(name, self.known_action_names())
        return action

    def hint_provider(self, name: str) -> HintProviderFactory:
        factory = self._hint_providers.get(name)
        if factory is None:
            raise UnknownHintProviderError(name, self.known_hint_provider_names())
        return factory

    def known_plugin_names(self) -> PluginCatalog:
        """The plugin names, sorted; also checks a configured plugin's arguments (see PluginCatalog)."""
        return PluginCatalog(self._plugins, self._hint_providers)

    def known_action_names(self) -> list[str]:
        return sorted(self._actions)

    def known_hint_provider_names(self) -> list[str]:
        return sorted(self._hint_providers)

    # -- entry points ----------------------------------------------------------------------------

    def load_entry_points(self) -> list[str]:
        """Register what installed distributions publish; returns one message per entry point
        that could not be used (it is also logged). A name already taken is not replaced."""
        problems: list[str] = []
        for group, register in (
            (PLUGIN_GROUP, self._register_plugin_entry),
            (ACTION_GROUP, self._register_action_entry),
            (HINT_PROVIDER_GROUP, self._register_hint_provider_entry),
        ):
            for entry in entry_points(group=group):
                problem = self._load_entry(entry, group, register)
                if problem:
                    _log.warning("entry point not loaded", group=group, name=entry.name, problem=problem)
                    problems.append(problem)
        return problems

    def _load_entry(self, entry: EntryPoint, group: str, register: Callable[[str, object], str]) -> str:
        where = f"entry point {entry.name} = {entry.value} in group {group}"
        try:
            loaded = entry.load()
        except Exception as error:  # third-party import: any failure is reported, never fatal
            return f"{where}: cannot be loaded: {type(error).__name__}: {error}"
        problem = register(entry.name, loaded)
        return f"{where}: {problem}" if problem else ""

    def _register_plugin_entry(self, name: str, loaded: object) -> str:
        if name in self._plugins:
            return f"plugin {name!r} is already registered"
        if not callable(loaded):
            return "a plugin entry point must name a builder: a callable taking the plugin's Arguments"
        builder: PluginBuilder = loaded
        self._plugins[name] = builder
        return ""

    def _register_action_entry(self, name: str, loaded: object) -> str:
        if name in self._actions:
            return f"action {name!r} is already registered"
        action = loaded
        if isinstance(loaded, type):
            try:
                action = loaded()
            except Exception as error:  # third-party constructor
                return f"cannot create the action: {type(error).__name__}: {error}"
        execute = getattr(action, "execute", None)
        if not callable(execute):
            return "an action entry point must name an object (or class) with execute(session)"
        self._actions[name] = _NamedAction(name, execute)
        return ""

    def _register_hint_provider_entry(self, name: str, loaded: object) -> str:
        if name in self._hint_providers:
            return f"hint provider {name!r} is already registered"
        if not callable(loaded):
            return "a hint provider entry point must name a factory (a callable)"
        self._hint_providers[name] = loaded
        return ""


class _NamedAction:
    """A third-party action under the name its entry point gives it."""

    def __init__(self, name: str, execute: Callable[..., object]) -> None:
        self.name = name
        self._execute = execute

    def execute(self, ssn: object) -> None:
        self._execute(ssn)
