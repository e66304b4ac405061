"""The resources numasched watches, each as an informer over the real client's list function."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
import structlog
from kubernetes_asyncio import client

from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.informer import DEFAULT_INFORMER_TIMING, EventSink, Informer, InformerTiming
from numasched.conf.loader import CONFIG_KEY, ConfigError, config_from_configmap
from numasched.conf.watch import ConfigSource

log = structlog.get_logger("numasched.informer")

# Finished pods hold nothing on their node; the API server filters them out, as for kube-scheduler.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

# Called with the ConfigMap object and why its new text was refused.
RejectedConfigHandler = Callable[[Mapping[str, Any], str], Awaitable[None]]


@attrs.frozen(slots=True)
class ConfigMapRef:
    namespace: str
    name: str
    key: str = CONFIG_KEY

    @classmethod
    def parse(cls, text: str) -> ConfigMapRef:
        """'namespace/name' or 'namespace/name:key'."""
        reference, _, key = text.partition(":")
        namespace, slash, name = reference.partition("/")
        if not slash or not namespace or not name:
            raise ValueError(f"--config-map must be NAMESPACE/NAME[:KEY], got {text!r}")
        return cls(namespace, name, key or CONFIG_KEY)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ConfigMapFeed:
    """Hands the scheduler ConfigMap's text to the ConfigSource; a bad text keeps the old config."""

    def __init__(
        self,
        source: ConfigSource,
        reference: ConfigMapRef,
        on_rejected: RejectedConfigHandler | None = None,
    ) -> None:
        self.source = source
        self.reference = reference
        self._on_rejected = on_rejected
        self.rejected: list[str] = []
        # Rejections waiting to be reported through the API (events are async, sinks are not).
        self._pending_reports: list[tuple[Mapping[str, Any], str]] = []
        self.report_waiting = anyio.Event()

    def apply(self, event: ObjectEvent) -> None:
        if event.type is EventType.DELETED:
            log.warning(
                "scheduler ConfigMap deleted; keeping the configuration in force", configmap=str(self.reference)
            )
            return
        self._offer(event.obj)

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        if not objects:
            log.warning(
                "scheduler ConfigMap not found; keeping the configuration in force", configmap=str(self.reference)
            )
            return
        for obj in objects:
            self._offer(obj)

    def _offer(self, obj: Mapping[str, Any]) -> None:
        try:
            text = config_from_configmap(obj, self.reference.key)
            error = self.source.reload_text(text, f"ConfigMap {self.reference}")
        except ConfigError as refused:
            error = refused
        if error is None:
            return
        message = f"invalid configuration in ConfigMap {self.reference}, keeping the last good one: {error}"
        if message in self.rejected:
            return
        self.rejected.append(message)
        log.warning("config rejected", configmap=str(self.reference), error=str(error))
        self._pending_reports.append((obj, message))
        self.report_waiting.set()

    async def report(self) -> None:
        """Publish rejections (as Warning events on the ConfigMap) until cancelled."""
        while True:
            await self.report_waiting.wait()
            self.report_waiting = anyio.Event()
            pending, self._pending_reports = self._pending_reports, []
            for obj, message in pending:
                if self._on_rejected is not None:
                    await self._on_rejected(obj, message)


def build_informers(
    api_client: client.ApiClient,
    cache: EventSink,
    *,
    config_feed: ConfigMapFeed | None = None,
    timing: InformerTiming = DEFAULT_INFORMER_TIMING,
) -> list[Informer]:
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    scheduling = client.SchedulingV1Api(api_client)
    policy = client.PolicyV1Api(api_client)

    def custom_list(group: str, version: str, plural: str) -> Callable[..., Awaitable[Any]]:
        return functools.partial(custom.list_cluster_custom_object, group, version, plural)

    informers = [
        Informer(
            "Pod", "v1", core.list_pod_for_all_namespaces, cache, field_selector=POD_FIELD_SELECTOR, timing=timing
        ),
        Informer("Node", "v1", core.list_node, cache, timing=timing),
        Informer("PriorityClass", "scheduling.k8s.io/v1", scheduling.list_priority_class, cache, timing=timing),
        # Optional: without list/watch on PodDisruptionBudgets the pdb plugin sees none (the
        # Eviction API still enforces them).
        Informer(
            "PodDisruptionBudget",
            "policy/v1",
            policy.list_pod_disruption_budget_for_all_namespaces,
            cache,
            optional=True,
            timing=timing,
        ),
        Informer(
            "PodGroup",
            "scheduling.volcano.sh/v1beta1",
            custom_list("scheduling.volcano.sh", "v1beta1", "podgroups"),
            cache,
            optional=True,
            timing=timing,
        ),
        Informer(
            "Queue",
            "scheduling.volcano.sh/v1beta1",
            custom_list("scheduling.volcano.sh", "v1beta1", "queues"),
            cache,
            optional=True,
            timing=timing,
        ),
        Informer(
            "Numatopology",
            "nodeinfo.volcano.sh/v1alpha1",
            custom_list("nodeinfo.volcano.sh", "v1alpha1", "numatopologies"),
            cache,
            optional=True,
            timing=timing,
        ),
        Informer(
            "NodeResourceTopology",
            "topology.node.k8s.io/v1alpha2",
            custom_list("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies"),
            cache,
            optional=True,
            timing=timing,
        ),
    ]
    if config_feed is not None:
        reference = config_feed.reference
        informers.append(
            Informer(
                "ConfigMap",
                "v1",
                functools.partial(core.list_namespaced_config_map, reference.namespace),
                config_feed,
                field_selector=f"metadata.name={reference.name}",
                timing=timing,
            )
        )
    return informers
