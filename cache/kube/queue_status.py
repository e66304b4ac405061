"""Writing a Queue's status.allocated through the status subresource (Volcano's Queue CRD has one),
with a merge patch that touches nothing else; bounded by the timeout, never raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client

from numasched.cache.kube.binder import DEFAULT_TIMEOUT_S, MERGE_PATCH
from numasched.cache.kube.informer import read_status

log = structlog.get_logger("numasched.queue_status")


class KubeQueueStatusWriter:
    def __init__(self, api_client: client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._timeout = timeout

    async def write(self, queue_name: str, allocated: Mapping[str, str]) -> bool:
        """True when the API server took it; a refusal or failure is logged."""
        try:
            response = await self._custom.patch_cluster_custom_object_status(
                "scheduling.volcano.sh",
                "v1beta1",
                "queues",
                queue_name,
                {"status": {"allocated": dict(allocated)}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("queue status not written", queue=queue_name, error=repr(error))
            return False
        if 200 <= response.status < 300:
            response.release()
            return True
        refusal = await read_status(response)
        log.warning("queue status refused", queue=queue_name, status=refusal.status, error=refusal.message)
        return False
