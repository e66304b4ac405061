"""The console of `numasched run`: the policy API writes the scheduler's ConfigMap, and the
cluster reviews who may read and write."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from kubernetes_asyncio import client

from numasched.cache.cache import Cache
from numasched.cache.kube.resources import ConfigMapRef
from numasched.conf.watch import ConfigSource
from numasched.scheduler.console.access import Access, ClosedAccess, OpenAccess
from numasched.scheduler.console.access_review import ClusterReviewAccess
from numasched.scheduler.console.policy_configmap import ConfigMapPolicyStore
from numasched.scheduler.console.policy_store import PolicyStore, ReadOnlyPolicyStore
from numasched.scheduler.console.server import Console, PolicyAccess, write_request_for
from numasched.scheduler.console.wiring import ConsoleOptions, assemble_console
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.metrics import SchedulerMetrics


def cluster_console(
    cache: Cache,
    config_source: ConfigSource,
    metrics: SchedulerMetrics,
    api_client: client.ApiClient,
    *,
    options: ConsoleOptions,
    config_map: ConfigMapRef | None,
    config_file: Path | None,
    known_plugins: Collection[str],
    known_actions: Collection[str],
    registry: Registry | None = None,
    timeout_s: float,
) -> Console:
    """The console of a scheduler running against a cluster: reads reviewed by the cluster unless
    anonymous reads are on; writes always reviewed, as an update of the scheduler's ConfigMap."""
    store: PolicyStore
    if config_map is not None:
        store = ConfigMapPolicyStore(
            api_client,
            config_map,
            config_source,
            known_plugins=known_plugins,
            known_actions=known_actions,
            timeout_s=timeout_s,
        )
        reviews = ClusterReviewAccess(api_client, timeout_s=timeout_s)
        write: Access = reviews
        write_request = write_request_for(config_map.namespace, config_map.name)
    else:
        source = f"file {config_file}" if config_file is not None else "the default configuration"
        reason = f"the configuration comes from {source}; run with --config-map for the policy API to change it"
        store = ReadOnlyPolicyStore(source, reason)
        reviews = ClusterReviewAccess(api_client, timeout_s=timeout_s)
        write = ClosedAccess(reason)
        write_request = write_request_for("", "")
    read: Access = OpenAccess() if options.anonymous_reads else reviews
    access = PolicyAccess(read, write, write_request)
    return assemble_console(cache, config_source, metrics, store, access, registry)
