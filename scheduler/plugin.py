"""What a plugin and an action are: built per session from their arguments (as in Volcano)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from numasched.scheduler.arguments import Arguments

if TYPE_CHECKING:
    from numasched.scheduler.session import Session


class Plugin(Protocol):
    @property
    def name(self) -> str: ...

    def on_session_open(self, ssn: Session) -> None: ...

    def on_session_close(self, ssn: Session) -> None: ...


PluginBuilder = Callable[[Arguments], Plugin]


class Action(Protocol):
    @property
    def name(self) -> str: ...

    def execute(self, ssn: Session) -> None: ...
