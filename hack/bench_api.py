"""End-to-end benchmark through the API: `numasched run`'s runner (real kubernetes_asyncio client,
informers, leader election, binder) against the test API server (tests/kubeapi_server.py) on
127.0.0.1, the server in a process of its own so the two do not share one interpreter.

Two scenarios, each on a fresh server with `--nodes` nodes (half 8-GPU 2-NUMA machines, half
4-NUMA EPYC machines, as the end-to-end tests use):

- burst: `--pods` pods created at once; time from the first creation to the first binding the
  server receives, and to the last (every pod bound);
- stream: pods created at `--rate` per second for `--seconds`; per pod, creation to binding as
  the server sees it (p50, p99, max);
- both: the burst, then the stream, each on a fresh server and scheduler.

`--unfit N` adds N pods that fit no node (each asks for more CPUs than any node has) before the
clock starts: they are decided and reported once, then wait among the unschedulable pods, so the
cycles the new pods start do not decide them again. What they cost without that shows with
`--pod-max-unschedulable 0.001 --pod-initial-backoff 0.001 --pod-max-backoff 0.001`: every cycle
decides them again, as every cycle did before.

Times are taken by the server process (creation when it stores the pod, binding when it commits
the Binding), on one clock. The scheduler process reports its peak RSS.

    .venv/bin/python hack/bench_api.py --scenario burst --nodes 1000 --pods 5000
    .venv/bin/python hack/bench_api.py --scenario stream --nodes 1000 --rate 100 --seconds 30
    .venv/bin/python hack/bench_api.py --scenario both --nodes 1000 --unfit 200

Each summary line carries the command that reproduces it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import structlog
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kubeapi_server import JsonObject, KubeApiServer  # noqa: E402
from kubernetes_asyncio import client  # noqa: E402

from numasched.cache.kube.informer import InformerTiming  # noqa: E402
from numasched.cache.machine_shapes import machine_objects  # noqa: E402
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT  # noqa: E402
from numasched.scheduler.loop_unschedulable import DEFAULT_BACKOFF, DEFAULT_FLUSH_AFTER_S, BackoffPolicy  # noqa: E402
from numasched.scheduler.runner import RunOptions, SchedulerRunner  # noqa: E402

MACHINES = REPO / "tests" / "fixtures" / "machines"
SCHEDULER_NAME = "numasched"
LEASE_NAMESPACE = "kube-system"


class TimedServer(KubeApiServer):  # type: ignore[misc]
    """The test API server, noting when each pod is created and bound (wall clock, one process)."""

    def __init__(self) -> None:
        super().__init__(bookmark_interval=1.0, max_history=1_000_000)
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}

    def add_pod(self, name: str, cpus: int = 1) -> None:
        resources = {"cpu": str(cpus), "memory": "1Gi"}
        self.created[name] = time.time()
        self.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
                    ],
                },
                "status": {"phase": "Pending"},
            }
        )

    def _bind(self, namespace: str, name: str, binding: JsonObject) -> JsonObject:
        answer: JsonObject = super()._bind(namespace, name, binding)
        self.bound.setdefault(name, time.time())
        return answer


def add_nodes(server: TimedServer, count: int) -> None:
    gpu = yaml.safe_load((MACHINES / "pcie-8gpu-2numa.yaml").read_text())
    cpu = yaml.safe_load((MACHINES / "epyc-1s-nps4.yaml").read_text())
    for index in range(count):
        node, topology = machine_objects(gpu if index % 2 == 0 else cpu, f"node-{index:05d}")
        server.add(node)
        server.add(topology)


def lease_held(server: TimedServer) -> bool:
    lease = server.get("coordination.k8s.io/v1", "Lease", "numasched", LEASE_NAMESPACE)
    return lease is not None and bool(lease.get("spec", {}).get("holderIdentity"))


def reported_unschedulable(server: TimedServer, name: str) -> bool:
    pod = server.get("v1", "Pod", name, "default") or {}
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (the smallest value with at least `fraction` of them at or below)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1]


async def serve(connection: multiprocessing.connection.Connection, arguments: dict[str, Any]) -> None:
    server = TimedServer()
    await server.start()
    try:
        add_nodes(server, arguments["nodes"])
        connection.send(server.url)
        deadline = time.monotonic() + 120
        while not lease_held(server) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # More CPUs than any machine has: reported unschedulable, never bound.
        unfit = [f"unfit-{index:05d}" for index in range(arguments["unfit"])]
        for index, name in enumerate(unfit):
            # Each its own size, so no two share an equivalence class (and its cached verdicts).
            server.add_pod(name, cpus=100_000 + index)
        # The clock starts once every one of them was decided (and reported) at least once.
        deadline = time.monotonic() + arguments["timeout"]
        while not all(reported_unschedulable(server, name) for name in unfit) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # The leader lists everything once it leads; let that settle before the clock starts.
        await asyncio.sleep(arguments["settle"])
        names: list[str] = []
        started = time.time()
        if arguments["scenario"] == "burst":
            for index in range(arguments["pods"]):
                name = f"burst-{index:05d}"
                server.add_pod(name)
                names.append(name)
        else:
            interval = 1.0 / arguments["rate"]
            total = int(arguments["rate"] * arguments["seconds"])
            for index in range(total):
                # On schedule, not after the previous one: a late tick does not slow the stream.
                delay = started + index * interval - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                name = f"stream-{index:05d}"
                server.add_pod(name)
                names.append(name)
        created_all = time.time()
        deadline = time.monotonic() + arguments["timeout"]
        while len(server.bound) < len(names) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        connection.send(
            {
                "started": started,
                "created_all": created_all,
                "created": {name: server.created[name] for name in names},
                "bound": dict(server.bound),
                "binds": sum(server.bind_counts.values()),
            }
        )
        # Serve on until the scheduler has stopped (it releases its Lease through us).
        await asyncio.to_thread(connection.recv)
    finally:
        await server.stop()


def server_process(connection: multiprocessing.connection.Connection, arguments: dict[str, Any]) -> None:
    asyncio.run(serve(connection, arguments))


def summarise(
    arguments: dict[str, Any], report: dict[str, Any], peak_rss_kib: int, cpu_s: float, cycles: int
) -> dict[str, Any]:
    created: dict[str, float] = report["created"]
    bound = {name: at for name, at in report["bound"].items() if name in created}
    summary: dict[str, Any] = {
        "scenario": arguments["scenario"],
        "nodes": arguments["nodes"],
        "pods": len(created),
        "bound": len(bound),
        "binds_received": report["binds"],
        "unfit": arguments["unfit"],
        "schedule_period_s": arguments["period"],
        "bind_concurrency": arguments["bind_concurrency"],
        "pod_max_unschedulable_s": arguments["pod_max_unschedulable"],
        "pod_backoff_s": [arguments["pod_initial_backoff"], arguments["pod_max_backoff"]],
        "scheduler_peak_rss_mib": round(peak_rss_kib / 1024, 1),
        "scheduler_cpu_s": round(cpu_s, 2),
        "cycles": cycles,
    }
    if not bound:
        return summary
    started = report["started"]
    if arguments["scenario"] == "burst":
        summary["create_all_s"] = round(report["created_all"] - started, 3)
        summary["first_bind_s"] = round(min(bound.values()) - started, 3)
        summary["all_bound_s"] = round(max(bound.values()) - started, 3) if len(bound) == len(created) else None
    else:
        latencies = [bound[name] - created[name] for name in bound]
        summary["rate_per_s"] = arguments["rate"]
        summary["p50_ms"] = round(1000 * percentile(latencies, 0.50), 1)
        summary["p99_ms"] = round(1000 * percentile(latencies, 0.99), 1)
        summary["max_ms"] = round(1000 * max(latencies), 1)
    return summary


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_scheduler(arguments: dict[str, Any]) -> dict[str, Any]:
    cpu_at_start = cpu_seconds()
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=server_process, args=(theirs, arguments), daemon=True)
    process.start()
    try:
        url = await anyio.to_thread.run_sync(ours.recv)
        with tempfile.TemporaryDirectory() as folder:
            config_file = Path(folder) / "scheduler.conf"
            config_file.write_text(DEFAULT_CONFIG_TEXT)
            options = RunOptions(
                config_file=config_file,
                schedule_period=arguments["period"],
                lease_namespace=LEASE_NAMESPACE,
                identity="bench-api",
                bind_concurrency=arguments["bind_concurrency"],
                max_unschedulable=arguments["pod_max_unschedulable"],
                pod_backoff=BackoffPolicy(arguments["pod_initial_backoff"], arguments["pod_max_backoff"]),
                informer_timing=InformerTiming(request_timeout=30.0, watch_timeout=300),
            )
            async with client.ApiClient(client.Configuration(host=url)) as api_client:
                runner = SchedulerRunner(api_client, options)
                report: dict[str, Any] = {}
                async with anyio.create_task_group() as group:
                    group.start_soon(runner.run)
                    report = await anyio.to_thread.run_sync(ours.recv)
                    runner.stop()
            ours.send("stopped")
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
    # The peak is the process's: with --scenario both, the stream's includes the burst's.
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return summarise(arguments, report, peak_rss_kib, cpu_seconds() - cpu_at_start, runner.cycles)


def parse_arguments(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("burst", "stream", "both"), required=True)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000, help="burst: pods created at once")
    parser.add_argument("--rate", type=float, default=100.0, help="stream: pods created per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="stream: how long pods keep coming")
    parser.add_argument("--period", type=float, default=1.0, help="the scheduler's --schedule-period")
    parser.add_argument("--bind-concurrency", type=int, default=16)
    parser.add_argument("--unfit", type=int, default=0, help="pods that fit no node, created before the clock starts")
    parser.add_argument(
        "--pod-max-unschedulable",
        type=float,
        default=DEFAULT_FLUSH_AFTER_S,
        help="the scheduler's --pod-max-unschedulable, in seconds",
    )
    parser.add_argument("--pod-initial-backoff", type=float, default=DEFAULT_BACKOFF.initial_s, help="seconds")
    parser.add_argument("--pod-max-backoff", type=float, default=DEFAULT_BACKOFF.max_s, help="seconds")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between leading and the first pod")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every pod to be bound")
    parser.add_argument("--verbose", action="store_true", help="keep the scheduler's info logs")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    return vars(parser.parse_args(argv))


def command_line(arguments: dict[str, Any]) -> str:
    """The command that runs this scenario again, every option that matters to it spelled out."""
    names = ["scenario", "nodes"]
    names += ["pods"] if arguments["scenario"] == "burst" else ["rate", "seconds"]
    names += ["unfit", "period", "bind_concurrency", "pod_max_unschedulable", "pod_initial_backoff", "pod_max_backoff"]
    names += ["settle", "timeout"]
    words = [".venv/bin/python", "hack/bench_api.py"]
    for name in names:
        value = arguments[name]
        words += [f"--{name.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(words)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    if not arguments["verbose"]:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    scenarios = ("burst", "stream") if arguments["scenario"] == "both" else (arguments["scenario"],)
    summaries = []
    for scenario in scenarios:
        one = {**arguments, "scenario": scenario}
        summary = anyio.run(run_scheduler, one)
        summary["command"] = command_line(one)
        summaries.append(summary)
        print(json.dumps(summary, sort_keys=True), flush=True)
    if arguments["json"] is not None:
        arguments["json"].write_text("".join(json.dumps(summary, sort_keys=True) + "\n" for summary in summaries))
    return 0 if all(summary["bound"] == summary["pods"] for summary in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
