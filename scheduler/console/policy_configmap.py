"""The policy API's writes to the scheduler's ConfigMap, then to the configuration in force.

The new text is checked by the same loader as every hot reload (a refused text is a 400 naming the
field), written to the ConfigMap with its resourceVersion (a concurrent edit is re-read and the
change made again on top of it), and handed to ConfigSource.reload_text at once, the very call the
ConfigMap watch makes when it sees the new version (which then finds nothing new): the running
scheduler uses it from its next cycle, without a restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from functools import partial
from typing import Any

import aiohttp
import anyio
import structlog
from kubernetes_asyncio import client

from numasched.cache.kube.informer import ApiStatusError, read_status
from numasched.cache.kube.resources import ConfigMapRef
from numasched.conf.loader import ConfigError, config_from_configmap
from numasched.conf.watch import ConfigSource
from numasched.scheduler.console.policy import PolicyChange, PolicyRequestError
from numasched.scheduler.console.policy_store import PolicyWriteError, checked_text

log = structlog.get_logger("numasched.console")

# Concurrent edits of the ConfigMap re-read and re-applied at most this often before a 409.
MAX_CONFLICT_RETRIES = 3


class ConfigMapPolicyStore:
    def __init__(
        self,
        api_client: client.ApiClient,
        reference: ConfigMapRef,
        config_source: ConfigSource,
        *,
        known_plugins: Collection[str],
        known_actions: Collection[str],
        timeout_s: float,
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self.reference = reference
        self._config_source = config_source
        self._plugins = known_plugins
        self._actions = known_actions
        self._timeout_s = timeout_s

    @property
    def source(self) -> str:
        return f"ConfigMap {self.reference}"

    @property
    def writable(self) -> bool:
        return True

    async def write(self, change: PolicyChange) -> None:
        for _ in range(MAX_CONFLICT_RETRIES):
            current = await self._call(self._read)
            text = self._text(current)
            changed = checked_text(text, change, self.source, self._plugins, self._actions)
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": current.get("metadata") or {},
                "data": {**(current.get("data") or {}), self.reference.key: changed},
            }
            try:
                await self._call(partial(self._replace, body))
            except PolicyWriteError as error:
                if error.status == 409:
                    continue  # changed since we read it: make the change again on the new text
                raise
            error_in_force = self._config_source.reload_text(changed, self.source)
            if error_in_force is not None:  # checked above with the same loader; kept as a guard
                raise PolicyWriteError(503, f"written, but not put in force: {error_in_force}")
            log.info("numa-aware policy changed", configmap=str(self.reference), enabled=change.enable)
            return
        raise PolicyWriteError(409, f"{self.source} kept changing under the write; try again")

    def _text(self, obj: dict[str, Any]) -> str:
        try:
            return config_from_configmap(obj, self.reference.key)
        except ConfigError as error:
            raise PolicyRequestError(error.path or "configuration", str(error)) from None

    async def _read(self) -> dict[str, Any]:
        response = await self._core.read_namespaced_config_map(
            self.reference.name, self.reference.namespace, _preload_content=False, _request_timeout=self._timeout_s
        )
        return await _json_or_raise(response)

    async def _replace(self, body: dict[str, Any]) -> None:
        response = await self._core.replace_namespaced_config_map(
            self.reference.name,
            self.reference.namespace,
            body,
            _preload_content=False,
            _request_timeout=self._timeout_s,
        )
        await _json_or_raise(response)

    async def _call(self, request: Callable[[], Awaitable[Any]]) -> Any:
        try:
            with anyio.fail_after(self._timeout_s):
                return await request()
        except TimeoutError:
            raise PolicyWriteError(
                503, f"{self.source}: the API server did not answer within {self._timeout_s:g}s"
            ) from None
        except ApiStatusError as error:
            if error.status == 409:
                raise PolicyWriteError(409, f"{self.source} changed while it was being written") from None
            if error.status == 404:
                raise PolicyWriteError(404, f"{self.source} does not exist") from None
            raise PolicyWriteError(
                503, f"{self.source}: the API server answered {error.status}: {error.message}"
            ) from None
        except (aiohttp.ClientError, OSError, ValueError) as error:
            raise PolicyWriteError(503, f"{self.source}: {error}") from None


async def _json_or_raise(response: Any) -> dict[str, Any]:
    if not 200 <= response.status < 300:
        raise await read_status(response)
    try:
        body = await response.json(content_type=None)
    finally:
        response.release()
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object from the API server, got {type(body).__name__}")
    return body
