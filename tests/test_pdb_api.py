"""PodDisruptionBudgets through the real informers against the test API server: a budget is
listed and watched into the cache; an unreadable one is kept on its safe side and named in a
Warning event on the budget."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client
from test_poison_api import FAST, events_about, wait_until

from numasched.cache.cache import Cache
from numasched.cache.kube.binder import KubeStatusReporter
from numasched.cache.kube.problems import ObjectProblemWriter
from numasched.cache.kube.resources import build_informers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": name}}, **spec},
    }


async def test_budgets_reach_the_cache_and_a_bad_one_is_named(server: KubeApiServer) -> None:
    server.add(budget("web", minAvailable=1))
    async with client.ApiClient(client.Configuration(host=server.url)) as api, anyio.create_task_group() as group:
        reporter = KubeStatusReporter(api, timeout=5.0)
        writer = ObjectProblemWriter(api, reporter, scheduler_names=("numasched",), timeout=5.0)
        cache = Cache(("numasched",), on_problem=writer.note)
        informers = build_informers(api, cache, timing=FAST)
        for informer in informers:
            group.start_soon(informer.run)
        group.start_soon(writer.run)
        for informer in informers:
            await informer.synced.wait()
        budgets = cache.snapshot().disruption_budgets
        assert budgets["default/web"].min_available is not None
        assert budgets["default/web"].matches("default", {"app": "web"})
        # Watched: a new budget with an unreadable minAvailable allows no disruption and is named.
        server.add(budget("db", minAvailable="most"))
        await wait_until(lambda: "default/db" in cache.snapshot().disruption_budgets, 10, "the watched budget")
        assert cache.snapshot().disruption_budgets["default/db"].disruptions_allowed == 0
        await wait_until(
            lambda: any(
                "spec.minAvailable" in e["message"]
                for e in events_about(server, "PodDisruptionBudget", "db", "InvalidObject")
            ),
            10,
            "a Warning event on the budget",
        )
        group.cancel_scope.cancel()
