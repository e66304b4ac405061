"""What a plugin and an action are: built per session from their arguments (as in Volcano)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from numasched.scheduler.framework.arguments import Arguments

if TYPE_CHECKING:
    from numasched.api.task import TaskInfo
    from numasched.scheduler.framework.session import Session


class Plugin(Protocol):
    @property
    def name(self) -> str: ...

    def on_session_open(self, ssn: Session) -> None: ...

    def on_session_close(self, ssn: Session) -> None: ...


PluginBuilder = Callable[[Arguments], Plugin]


@runtime_checkable
class DeclaresEquivalence(Protocol):
    """A plugin whose predicate and node-order answers depend only on the node's state and on
    what of the pod `equivalence_key` returns (and on the plugin's arguments). The engine then
    memoises those answers per (key, node generation) and shares them between equivalent pods
    (framework/equivalence.py). A plugin that registers a predicate or node-order function without
    this method turns the memo off, so declaring it is a promise, not an optimisation hint:
    whatever the functions read of the pod must be in the key.
    A status whose reason names the pod it was computed for is never shared."""

    def equivalence_key(self, task: TaskInfo) -> Hashable: ...


# A hint provider factory; its protocol belongs to the numa-aware plugin, not to the framework.
HintProviderFactory = Callable[..., object]


@runtime_checkable
class ChecksHintProviders(Protocol):
    """A plugin whose arguments name hint providers (numa-aware's `hint-providers`): the
    configuration loader hands it the registered factories so that an unknown provider, or one its
    arguments cannot build, refuses the configuration instead of being skipped every session.
    Raises PluginArgumentError naming the argument."""

    def check_hint_providers(self, factories: Mapping[str, HintProviderFactory]) -> None: ...


class Action(Protocol):
    @property
    def name(self) -> str: ...

    def execute(self, ssn: Session) -> None: ...
