"""`numasched simulate`: the real scheduler loop on an in-memory cluster loaded from YAML.

It runs cycles until one binds nothing new, then reports every pod of ours: where it went (node,
NUMA nodes, CPUs, devices) or why it could not be placed, plus every object that was skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import structlog

from numasched.cache.cache import Cache
from numasched.cache.queue_status import SimQueueStatusWriter
from numasched.cache.sim_evictor import SimEvictor
from numasched.cache.simcluster import SimCluster
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_INPUT, EXIT_OK, EXIT_UNPLACED
from numasched.cli_input_files import InputFileError, read_yaml_file
from numasched.conf.loader import ConfigError, load_config_text, read_config_file
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.loop import schedule_cycle
from numasched.scheduler.simulate_report import SimulationReport, build_report, render

log = structlog.get_logger("numasched.simulate")

EXAMPLES = "numasched.conf.examples"


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The YAML inputs of a simulated cluster (simulate, explain): the bundled example by default."""
    parser.add_argument(
        "--cluster",
        type=Path,
        action="append",
        help="YAML file(s) of Nodes and Numatopology/NodeResourceTopology objects "
        "(default: the bundled example cluster)",
    )
    parser.add_argument(
        "--workload",
        type=Path,
        action="append",
        help="YAML file(s) of Pods, PodGroups, Queues and PriorityClasses (default: the bundled example workload)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="volcano-scheduler.conf, or a ConfigMap manifest holding one (default: the bundled example config)",
    )


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument("--output", choices=("table", "json", "yaml"), default="table", help="report format")
    parser.add_argument("--scheduler-name", default="numasched", help="spec.schedulerName of the pods to schedule")
    parser.add_argument("--max-cycles", type=int, default=100, help="stop after this many scheduling cycles")
    parser.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    parser.add_argument(
        "--serve",
        metavar="ADDR",
        default=None,
        help="after the run, serve the NUMA console of the simulated cluster on HOST:PORT (or :PORT) until "
        "interrupted (docs/console.md)",
    )
    parser.add_argument(
        "--fail-on-unschedulable",
        action="store_true",
        help=f"exit with {EXIT_UNPLACED} when any pod of ours stays unplaced (unschedulable or pending)",
    )


def _example_text(name: str) -> tuple[str, str]:
    resource = resources.files(EXAMPLES).joinpath(name)
    return resource.read_text(encoding="utf-8"), f"bundled example {name}"


def load_config(path: Path | None, registry: Registry) -> SchedulerConfig:
    if path is None:
        text, source = _example_text("scheduler.conf")
    else:
        text, source = read_config_file(path), str(path)
    return load_config_text(text, source, registry.known_plugin_names(), registry.known_action_names())


async def simulate(
    cluster: SimCluster,
    config: SchedulerConfig,
    registry: Registry,
    *,
    max_cycles: int,
    progress: bool,
    evictor: SimEvictor | None = None,
) -> int:
    """Run cycles until a cycle binds and evicts nothing new; returns the number of cycles run.
    Victims of preempt / reclaim go to `evictor` (one of the cluster's own when not given)."""
    evictor = evictor if evictor is not None else SimEvictor(cluster)
    queue_status = SimQueueStatusWriter(cluster)
    pending = sum(1 for pod in cluster.pods() if not _node_name(pod))
    cycles = 0
    bar = _progress_bar(progress and pending >= 200, pending)
    with bar:
        task_id = bar.add_task("scheduling", total=pending)
        while cycles < max_cycles:
            before = sum(cluster.bind_count.values())
            evicted_before = len(evictor.evicted)
            await schedule_cycle(
                cluster.cache, config, registry, cluster, cluster, evictor=evictor, queue_status=queue_status
            )
            cycles += 1
            bound_now = sum(cluster.bind_count.values())
            bar.update(task_id, completed=bound_now)
            # A cycle that only evicted makes room the next one binds into.
            if bound_now == before and len(evictor.evicted) == evicted_before:
                break
    return cycles


def _node_name(pod: Mapping[str, Any]) -> str:
    """spec.nodeName, or "" for a pod whose spec is not an object (the cache reports that pod)."""
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def _progress_bar(enabled: bool, total: int) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not enabled or not sys.stderr.isatty(),
    )


def read_inputs(paths: list[Path] | None, example: str) -> list[tuple[str, str]]:
    """(text, source) of every input file, or of the bundled example when none is given.

    Every file is read and checked to be YAML before anything is loaded: a bad file stops the run
    (InputFileError) instead of leaving a cluster that silently lacks its objects.
    """
    if not paths:
        return [_example_text(example)]
    return [(read_yaml_file(path), str(path)) for path in paths]


def load_cluster(args: argparse.Namespace) -> SimCluster:
    """A simulated cluster of the --cluster and --workload files (add_input_arguments), or of the
    bundled example; InputFileError when a file cannot be read."""
    inputs = [*read_inputs(args.cluster, "cluster.yaml"), *read_inputs(args.workload, "workload.yaml")]
    cluster = SimCluster(Cache((args.scheduler_name,)))
    for text, source in inputs:
        cluster.load_text(text, source)
    return cluster


def unplaced_pods(report: SimulationReport) -> int:
    return report.count("Unschedulable") + report.count("Pending")


async def run_simulate(args: argparse.Namespace) -> int:
    """The `numasched simulate` command; the exit status is one of numasched.cli_exit_codes."""
    registry = default_registry(with_entry_points=True)
    try:
        config = load_config(args.config, registry)
    except ConfigError as error:
        print(f"numasched simulate: {error}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cluster = load_cluster(args)
    except InputFileError as error:
        print(f"numasched simulate: {error}", file=sys.stderr)
        return EXIT_INPUT
    started = time.perf_counter()
    evictor = SimEvictor(cluster, scheduler_name=args.scheduler_name)
    cycles = await simulate(
        cluster, config, registry, max_cycles=args.max_cycles, progress=not args.no_progress, evictor=evictor
    )
    report: SimulationReport = build_report(
        cluster, cycles=cycles, seconds=time.perf_counter() - started, evictions=evictor.evicted
    )
    sys.stdout.write(render(report, args.output))
    code = EXIT_OK
    if args.fail_on_unschedulable and unplaced_pods(report):
        print(f"numasched simulate: {unplaced_pods(report)} of {len(report.pods)} pods unplaced", file=sys.stderr)
        code = EXIT_UNPLACED
    if args.serve is not None:
        sys.stdout.flush()
        serve_code = await serve_console(cluster.cache, config, registry, args.serve)
        if serve_code != EXIT_OK:
            return serve_code
    return code


async def serve_console(cache: Cache, config: SchedulerConfig, registry: Registry, address: str) -> int:
    """Serve the console of the simulated cluster on address until SIGINT or SIGTERM."""
    import signal

    import anyio

    from numasched.conf.watch import ConfigSource
    from numasched.scheduler.console.wiring import simulation_console
    from numasched.scheduler.health import HealthServer, parse_address
    from numasched.scheduler.metrics import SchedulerMetrics

    try:
        host, _ = parse_address(address)
    except ValueError as error:
        print(f"numasched simulate: --serve: {error}", file=sys.stderr)
        return EXIT_CONFIG
    metrics = SchedulerMetrics()
    console = simulation_console(cache, ConfigSource(config), metrics, registry)
    server = HealthServer(
        metrics,
        live=lambda: None,
        ready=lambda: None,
        extensions=(console.install,),
        before_scrape=(console.views.view,),
    )
    async with anyio.create_task_group() as group:
        try:
            port = await group.start(server.serve, address)
        except OSError as error:
            print(f"numasched simulate: cannot serve on {address}: {error.strerror or error}", file=sys.stderr)
            group.cancel_scope.cancel()
            return EXIT_CONFIG
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"numasched simulate: console at http://{shown}:{port}/ui/ (Ctrl-C to stop)", file=sys.stderr)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        group.cancel_scope.cancel()
    return EXIT_OK
