"""What a plugin and an action are: built per session from their arguments (as in Volcano)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from numasched.scheduler.framework.arguments import Arguments

if TYPE_CHECKING:
    from numasched.scheduler.framework.session import Session


class Plugin(Protocol):
    @property
    def name(self) -> str: ...

    def on_session_open(self, ssn: Session) -> None: ...

    def on_session_close(self, ssn: Session) -> None: ...


PluginBuilder = Callable[[Arguments], Plugin]

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
