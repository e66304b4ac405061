"""Create or update a cluster-scoped custom object, writing only when its content changed.

Remembers the last object written (with its resourceVersion) so an unchanged report costs no API
call; a changed one is PUT with that resourceVersion, and a 409 (someone else wrote in between)
is retried on a freshly read copy. Every call is bounded by a timeout.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = structlog.get_logger("numasched.exporter.publisher")

MAX_CONFLICT_RETRIES = 5


class PublishError(Exception):
    """The object could not be written; the message names it and says why."""


def _content(obj: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    metadata = obj.get("metadata") or {}
    return (
        obj.get("spec"),
        {key: value for key, value in obj.items() if key not in ("metadata", "spec", "apiVersion", "kind")},
        metadata.get("annotations") or {},
        metadata.get("labels") or {},
    )


def _merge_metadata(desired: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """desired with the live object's resourceVersion and its other labels/annotations kept."""
    merged = copy.deepcopy(dict(desired))
    live = current.get("metadata") or {}
    metadata = merged.setdefault("metadata", {})
    metadata["resourceVersion"] = live.get("resourceVersion")
    for field in ("annotations", "labels"):
        combined = dict(live.get(field) or {})
        combined.update(metadata.get(field) or {})
        if combined:
            metadata[field] = combined
    return merged


class ObjectPublisher:
    def __init__(
        self,
        api: client.CustomObjectsApi,
        group: str,
        version: str,
        plural: str,
        *,
        timeout: float = 10.0,
        heartbeat: float = 300.0,
    ) -> None:
        self.api = api
        self.group = group
        self.version = version
        self.plural = plural
        self.timeout = timeout
        self.heartbeat = heartbeat
        self._last: dict[str, Any] | None = None
        self._last_written_at = 0.0
        self.writes = 0

    def _unchanged(self, desired: Mapping[str, Any]) -> bool:
        if self._last is None:
            return False
        if time.monotonic() - self._last_written_at >= self.heartbeat:
            return False
        last_annotations = (self._last.get("metadata") or {}).get("annotations") or {}
        wanted = (desired.get("metadata") or {}).get("annotations") or {}
        spec, rest, _, _ = _content(desired)
        last_spec, last_rest, _, _ = _content(self._last)
        return (
            spec == last_spec
            and rest == last_rest
            and all(last_annotations.get(key) == value for key, value in wanted.items())
        )

    async def _get(self, name: str) -> dict[str, Any] | None:
        try:
            current = await self.api.get_cluster_custom_object(
                self.group, self.version, self.plural, name, _request_timeout=self.timeout
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise PublishError(f"{self.plural}/{name}: GET failed: {error.status} {error.reason}") from None
        except (TimeoutError, aiohttp.ClientError) as error:
            raise PublishError(f"{self.plural}/{name}: GET failed: {error!r}") from None
        return dict(current)

    async def publish(self, desired: Mapping[str, Any]) -> bool:
        """Write `desired` unless unchanged since the last write; True when a write happened."""
        name = str((desired.get("metadata") or {}).get("name"))
        if self._unchanged(desired):
            return False
        current = self._last
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                if current is None:
                    current = await self._get(name)
                if current is None:
                    written = await self.api.create_cluster_custom_object(
                        self.group, self.version, self.plural, dict(desired), _request_timeout=self.timeout
                    )
                    log.info("created", object=f"{self.plural}/{name}")
                else:
                    written = await self.api.replace_cluster_custom_object(
                        self.group,
                        self.version,
                        self.plural,
                        name,
                        _merge_metadata(desired, current),
                        _request_timeout=self.timeout,
                    )
                    log.info("updated", object=f"{self.plural}/{name}")
            except ApiException as error:
                if error.status in (409, 404):
                    # 409: a stale resourceVersion (or created meanwhile); 404: deleted meanwhile.
                    log.info(
                        "write conflict; retrying on a fresh copy", object=f"{self.plural}/{name}", status=error.status
                    )
                    current = await self._get(name)
                    continue
                raise PublishError(
                    f"{self.plural}/{name}: write failed: {error.status} {error.reason}: {str(error.body)[:200]}"
                ) from None
            except TimeoutError:
                raise PublishError(f"{self.plural}/{name}: write timed out after {self.timeout}s") from None
            except aiohttp.ClientError as error:
                raise PublishError(f"{self.plural}/{name}: API server unreachable: {error}") from None
            self._last = dict(written)
            self._last_written_at = time.monotonic()
            self.writes += 1
            return True
        raise PublishError(f"{self.plural}/{name}: still conflicting after {MAX_CONFLICT_RETRIES} attempts")
