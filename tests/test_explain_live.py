"""`numasched explain --kubeconfig`: the same explanation from a live cluster (a fake API server)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubeapi_server import KubeApiServer

from numasched.cli import build_parser
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.logconfig import configure_logging
from numasched.scheduler.explain_command import run_explain

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent / "fixtures" / "thirdparty" / "volcano-issue-4998"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    # As the command line sets it up: warnings only, on stderr (stdout is the JSON document).
    configure_logging("warning", "console")


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        for name in ("cluster.yaml", "workload.yaml"):
            for obj in yaml.safe_load_all((FIXTURES / name).read_text()):
                if obj:
                    obj.setdefault("metadata", {})
                    if obj["kind"] == "Pod":
                        obj["metadata"].setdefault("namespace", "default")
                    running.add(obj)
        yield running


def _kubeconfig(server: KubeApiServer, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(server.kubeconfig()))
    return str(path)


async def _run(*argv: str) -> int:
    arguments = ["explain", *argv]
    return await run_explain(build_parser(arguments).parse_args(arguments))


async def test_live_cluster_is_explained_as_it_is(
    server: KubeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await _run("default/train-4gpu-again", "--kubeconfig", _kubeconfig(server, tmp_path), "--output", "json")
    assert code == EXIT_OK
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    nodes = {entry["node"]: entry for entry in document["nodes"]}
    # Nothing was placed (explain never schedules a live cluster): both 4-GPU pods still wait, and
    # gpu-b (four free GPUs on NUMA 0, per the fixture's notes) takes this one.
    assert nodes["gpu-b"]["fits"] is True
    assert nodes["gpu-a"]["plugin"] == "numa-aware"
    free = {view["numa"]: view["resources"] for view in nodes["gpu-a"]["numa"]}
    gpus = {numa: next(r for r in resources if r["resource"] == "nvidia.com/gpu") for numa, resources in free.items()}
    assert gpus[0]["freeIds"] == ["0", "1", "2"] and gpus[1]["freeIds"] == ["7"]
    # Read only: no pod got a node.
    assert not any(
        (pod.get("spec") or {}).get("nodeName") for pod in server.list("v1", "Pod") if "4gpu" in pod["metadata"]["name"]
    )


async def test_live_unknown_pod_is_an_input_error(
    server: KubeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await _run("default/missing", "--kubeconfig", _kubeconfig(server, tmp_path)) == EXIT_INPUT
    assert "default/missing" in capsys.readouterr().err


async def test_files_do_not_go_with_a_live_cluster(server: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(server, tmp_path)
    assert await _run("x", "--kubeconfig", kubeconfig, "--cluster", str(FIXTURES / "cluster.yaml")) == EXIT_USAGE


async def test_an_unreachable_cluster_ends_within_the_request_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on that port now: every list is refused and retried until the deadline.
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "gone", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "current-context": "gone",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    started = time.monotonic()
    assert await _run("default/x", "--kubeconfig", str(path), "--request-timeout", "0.5") == EXIT_FAILURE
    assert time.monotonic() - started < 5
    assert "--request-timeout" in capsys.readouterr().err


async def test_a_missing_context_is_a_configuration_error(
    server: KubeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await _run("default/x", "--kubeconfig", _kubeconfig(server, tmp_path), "--context", "nope")
    assert code == EXIT_CONFIG
    assert "nope" in capsys.readouterr().err
