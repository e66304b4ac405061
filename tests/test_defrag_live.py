"""`numasched defrag --kubeconfig ... --apply` against the test API server (with the Eviction
subresource and budget checks of test_preempt_evictor_api): evictions are issued in the plan's
order, and the run stops, saying why, at the first step that no longer holds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import load_hack_module
from kubernetes_asyncio import client
from test_preempt_evictor_api import EvictingApiServer

from numasched.cache.kube.evictor import KubeEvictor
from numasched.cli import build_parser
from numasched.cli_exit_codes import EXIT_FAILURE, EXIT_OK
from numasched.logconfig import configure_logging
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.defrag import parse_shape
from numasched.scheduler.defrag_command import apply_plan, live_state, run_defrag, step_problem
from numasched.scheduler.explain_command import live_cache
from numasched.scheduler.simulate import load_config

pytestmark = pytest.mark.anyio
GEN = load_hack_module("gen_fragmented_cluster")
SHAPE = "8xnvidia.com/gpu"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    configure_logging("warning", "console")


@pytest.fixture
async def server() -> AsyncIterator[EvictingApiServer]:
    async with EvictingApiServer() as running:
        cluster, workload = GEN.fragmented_cluster(1, 6)
        for obj in [*cluster, *workload]:
            running.add(obj)
        yield running


def _kubeconfig(server: EvictingApiServer, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(server.kubeconfig()))
    return str(path)


async def _run(*argv: str) -> int:
    arguments = ["defrag", *argv]
    return int(await run_defrag(build_parser(arguments).parse_args(arguments)))


async def test_apply_evicts_in_the_plans_order(
    server: EvictingApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = _kubeconfig(server, tmp_path)
    code = await _run("--kubeconfig", kubeconfig, "--shape", SHAPE, "--apply", "--output", "json")
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    plan = json.loads(captured.out)["plans"][0]
    assert plan["moves"], "the generated cluster needs moves"
    # The budget of the serving app was read from the cluster: at most one of its pods moves.
    serving = [move for move in plan["moves"] if "serving" in server_labels(workload_pods(), move["pod"])]
    assert len(serving) <= 1
    assert server.evictions == [tuple(move["pod"].split("/")) for move in plan["moves"]]
    assert f"{len(plan['moves'])} pod(s) evicted" in captured.err


def workload_pods() -> dict[str, dict[str, Any]]:
    _, workload = GEN.fragmented_cluster(1, 6)
    return {f"default/{obj['metadata']['name']}": obj for obj in workload if obj["kind"] == "Pod"}


def server_labels(pods: dict[str, dict[str, Any]], key: str) -> str:
    return str(pods[key]["metadata"]["labels"]["app"])


async def test_a_dry_run_evicts_nothing(server: EvictingApiServer, tmp_path: Path) -> None:
    assert await _run("--kubeconfig", _kubeconfig(server, tmp_path), "--shape", SHAPE) == EXIT_OK
    assert server.evictions == []


async def _plan_and_tools(server: EvictingApiServer, tmp_path: Path) -> tuple[Any, ...]:
    kubeconfig = _kubeconfig(server, tmp_path)
    registry = default_registry()
    config = load_config(None, registry)
    cache, budgets = await live_state(kubeconfig, None, "numasched", 10.0)
    from numasched.scheduler.defrag import defrag_in_cache

    plan = defrag_in_cache(cache, config, registry, parse_shape(SHAPE), scheduler_name="numasched", budgets=budgets)
    assert len(plan.moves) >= 2
    return kubeconfig, registry, config, plan


async def test_apply_stops_when_the_next_pod_is_gone(server: EvictingApiServer, tmp_path: Path) -> None:
    kubeconfig, registry, config, plan = await _plan_and_tools(server, tmp_path)
    second = plan.moves[1]
    refreshed = 0

    async def refresh() -> Any:
        nonlocal refreshed
        refreshed += 1
        if refreshed == 2:
            # Between the steps the pod of the second move went away (its job finished).
            namespace, name = second.pod.split("/")
            server.delete("v1", "Pod", name, namespace)
        return await live_cache(kubeconfig, None, "numasched", 10.0)

    lines: list[str] = []
    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        evictor = KubeEvictor(api, timeout=5.0)
        done, stopped = await apply_plan(
            plan, evictor, refresh, lambda cache, move: step_problem(cache, config, registry, move), lines.append
        )
    first = plan.moves[0]
    assert done == 1
    assert server.evictions == [tuple(first.pod.split("/"))]
    assert f"step 2/{len(plan.moves)}: {second.pod} from {second.node}" in stopped
    assert f"is no longer on node {second.node}" in stopped
    assert f"stopped after 1 of {len(plan.moves)} evictions" in stopped
    assert lines == [f"step 1/{len(plan.moves)}: {first.pod} from {first.node} to {first.destination}: evicted"]


async def test_apply_stops_when_the_destination_no_longer_fits(server: EvictingApiServer, tmp_path: Path) -> None:
    kubeconfig, registry, config, plan = await _plan_and_tools(server, tmp_path)
    first = plan.moves[0]
    # A node the first pod was to move to is cordoned after the plan was made.
    node = server.get("v1", "Node", first.destination)
    assert node is not None
    node.setdefault("spec", {})["unschedulable"] = True
    server.replace(node)

    async def refresh() -> Any:
        return await live_cache(kubeconfig, None, "numasched", 10.0)

    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        done, stopped = await apply_plan(
            plan,
            KubeEvictor(api, timeout=5.0),
            refresh,
            lambda cache, move: step_problem(cache, config, registry, move),
            lambda _line: None,
        )
    assert done == 0 and server.evictions == []
    assert f"no longer fits node {first.destination}" in stopped


async def test_apply_stops_when_a_budget_refuses(
    server: EvictingApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, _, _, plan = await _plan_and_tools(server, tmp_path)
    first = plan.moves[0]
    app = server_labels(workload_pods(), first.pod)
    # The API server's own budget check refuses (the cluster changed since the plan: 429).
    server.add_budget("default", {"app": app}, 0)
    code = await _run("--kubeconfig", kubeconfig, "--shape", SHAPE, "--apply")
    err = capsys.readouterr().err
    assert code == EXIT_FAILURE
    assert server.evictions == []
    assert "eviction not done (Blocked" in err and "stopped after 0 of" in err
