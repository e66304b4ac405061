"""Where a policy PUT is written: the protocol, a configuration no PUT may change, and the check
every new text passes. The ConfigMap store is in policy_configmap.py."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from numasched.conf.loader import ConfigError, load_config_text
from numasched.scheduler.console.policy import PolicyChange, PolicyRequestError, apply_change


class PolicyWriteError(Exception):
    """A write that did not happen: `status` is the HTTP answer (404, 409, 503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PolicyStore(Protocol):
    @property
    def source(self) -> str: ...

    @property
    def writable(self) -> bool: ...

    async def write(self, change: PolicyChange) -> None: ...


class ReadOnlyPolicyStore:
    """A configuration a PUT cannot change (a file, the defaults, a simulation): says why."""

    def __init__(self, source: str, reason: str) -> None:
        self._source = source
        self.reason = reason

    @property
    def source(self) -> str:
        return self._source

    @property
    def writable(self) -> bool:
        return False

    async def write(self, change: PolicyChange) -> None:
        raise PolicyWriteError(409, self.reason)


def checked_text(
    text: str, change: PolicyChange, source: str, plugins: Collection[str], actions: Collection[str]
) -> str:
    """The changed text, loaded once by the configuration loader; its ConfigError is a 400."""
    changed = apply_change(text, change)
    try:
        load_config_text(changed, f"{source} (as changed by the policy API)", plugins, actions)
    except ConfigError as error:
        raise PolicyRequestError(error.path or "configuration", str(error)) from None
    return changed
