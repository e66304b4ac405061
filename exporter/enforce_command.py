"""`numasched agent`: the exporter plus enforcement of numasched's decisions on this node.

Each period it discovers and publishes exactly what `numasched exporter` does, and in between it
pins the cgroups of the containers numasched decided (enforce_agent.Enforcer), compares every
decision with what the node did, and publishes the observed CPUs in the Numatopology's
podAllocations. A pod change seen by its watch (a container started or restarted) is pinned at
once, without waiting for the period.

A command of its own rather than an exporter flag: it needs what the read-only exporter must not
have (the cgroup mount read-write, a watch on the node's pods, events on pods), so it runs from its
own manifest (deploy/agent) and the exporter's stays as narrow as it is. It replaces the exporter
on a node, never runs beside it: both would publish the same Numatopology.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import pynvml
import structlog

from numasched.api.idset import IdSet
from numasched.api.topology import CpuManagerPolicy
from numasched.cache.kube.informer import Informer, InformerTiming
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.exporter.command import (
    ClientConfigError,
    GpuCache,
    _api_client,
    _pods_on_node,
    add_exporter_arguments,
    discover,
    objects_of,
    serve_metrics,
    startup_refusal,
)
from numasched.exporter.enforce_agent import EnforceMetrics, Enforcer, EventEmitter, PodEvents, report_mismatches
from numasched.exporter.enforce_cgroup import cgroup_version
from numasched.exporter.enforce_plan import with_observed
from numasched.exporter.metrics import ExporterMetrics
from numasched.exporter.numatopology import (
    NRT_GROUP,
    NRT_PLURAL,
    NRT_VERSION,
    NUMATOPOLOGY_GROUP,
    NUMATOPOLOGY_PLURAL,
    NUMATOPOLOGY_VERSION,
)
from numasched.exporter.publisher import ObjectPublisher, PublishError
from numasched.exporter.report import NodeReport, build_report, parse_device_id_formats
from numasched.exporter.usage import with_pod_names

log = structlog.get_logger("numasched.exporter.agent")


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    add_exporter_arguments(parser)
    parser.add_argument(
        "--cgroup-root",
        type=Path,
        default=Path("/sys/fs/cgroup"),
        help="the node's cgroup mount, read-write: the unified hierarchy (v2) or the directory holding "
        "the cpuset controller's mount (v1) (default /sys/fs/cgroup)",
    )


@attrs.frozen(slots=True)
class NodeFacts:
    """What pinning needs from the discovered topology."""

    static_cpu_manager: bool
    numa_of_cpu: dict[int, int]
    cpus: IdSet

    @classmethod
    def of(cls, report: NodeReport) -> NodeFacts:
        topology = report.topology
        return cls(
            static_cpu_manager=topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC,
            numa_of_cpu={info.cpu: info.numa for info in topology.cpus},
            cpus=IdSet(info.cpu for info in topology.cpus),
        )


async def enforcement_cycle(
    enforcer: Enforcer, report: NodeReport, emit: EventEmitter, metrics: EnforceMetrics
) -> NodeReport:
    """Pin, read back, report what differs; the report with the observed holdings in its usage."""
    facts = NodeFacts.of(report)
    enforcer.enforce(facts.static_cpu_manager, facts.numa_of_cpu)
    observed, mismatches = enforcer.observe(report.usage, facts.cpus, facts.static_cpu_manager, facts.numa_of_cpu)
    await report_mismatches(mismatches, emit, metrics)
    return attrs.evolve(report, usage=with_observed(report.usage, observed))


async def run_agent(args: argparse.Namespace, nvml: Any = pynvml) -> int:
    """Run the agent until cancelled (or once); the exit status, one of numasched.cli_exit_codes."""
    if args.dry_run:
        print("numasched agent: --dry-run is the exporter's; the agent always writes", file=sys.stderr)
        return EXIT_USAGE
    refused = startup_refusal(args, "agent")
    if refused is not None:
        return refused
    if cgroup_version(args.cgroup_root) is None:
        print(
            f"numasched agent: --cgroup-root {args.cgroup_root}: neither a cgroup v2 mount nor a v1 root "
            "holding cpuset/",
            file=sys.stderr,
        )
        return EXIT_INPUT
    try:
        api_client = await _api_client(args)
    except ClientConfigError as error:
        print(f"numasched agent: {error}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return await _run_agent(args, nvml, api_client)
    finally:
        await api_client.close()


async def _run_agent(args: argparse.Namespace, nvml: Any, api_client: Any) -> int:
    from kubernetes_asyncio import client

    metrics = ExporterMetrics()
    enforce_metrics = EnforceMetrics(metrics.registry)
    try:
        runner = await serve_metrics(metrics, args.metrics_addr) if args.metrics_addr and not args.once else None
    except OSError as error:
        print(
            f"numasched agent: cannot serve metrics on {args.metrics_addr}: {error.strerror or error}", file=sys.stderr
        )
        return EXIT_FAILURE
    enforcer = Enforcer(args.node_name, args.cgroup_root, enforce_metrics)
    events = PodEvents(api_client, args.node_name, args.timeout)
    core = client.CoreV1Api(api_client)
    pods = Informer(
        "Pod",
        "v1",
        core.list_pod_for_all_namespaces,
        enforcer,
        field_selector=f"spec.nodeName={args.node_name}",
        timing=InformerTiming(request_timeout=args.timeout),
    )
    custom = client.CustomObjectsApi(api_client)
    numatopologies = ObjectPublisher(
        custom,
        NUMATOPOLOGY_GROUP,
        NUMATOPOLOGY_VERSION,
        NUMATOPOLOGY_PLURAL,
        timeout=args.timeout,
        heartbeat=args.heartbeat,
    )
    nrts = ObjectPublisher(custom, NRT_GROUP, NRT_VERSION, NRT_PLURAL, timeout=args.timeout, heartbeat=args.heartbeat)
    status = EXIT_OK
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pods.run)
            with anyio.move_on_after(args.timeout):
                await pods.synced.wait()
            if not pods.synced.is_set():
                log.warning("the node's pods are not listed yet; pinning starts when they are", node=args.node_name)
            gpu_cache = GpuCache()
            while True:
                discovery = await discover(args, nvml, gpu_cache)
                if any(not pod.name or not pod.uid for pod in discovery.usage.pods):
                    names = await _pods_on_node(api_client, args.node_name, args.timeout)
                    discovery = attrs.evolve(discovery, usage=with_pod_names(discovery.usage, names))
                report = build_report(
                    args.node_name,
                    discovery,
                    parse_device_id_formats(args.device_id_format),
                    gpu_resource=args.gpu_resource,
                    rdma_resource=args.rdma_resource,
                )
                enforcer.changed = anyio.Event()
                report = await enforcement_cycle(enforcer, report, events.warn, enforce_metrics)
                metrics.update(report)
                objects = objects_of(report, args)
                try:
                    await numatopologies.publish(objects.numatopology)
                    if objects.node_resource_topology is not None:
                        await nrts.publish(objects.node_resource_topology)
                    status = EXIT_OK
                except PublishError as error:
                    log.error("publishing failed; retrying next period", node=args.node_name, error=str(error))
                    status = EXIT_FAILURE
                if args.once:
                    tasks.cancel_scope.cancel()
                    break
                await pin_until_next_period(enforcer, NodeFacts.of(report), args.period)
    finally:
        if runner is not None:
            await runner.cleanup()
    return status


async def pin_until_next_period(enforcer: Enforcer, facts: NodeFacts, period: float) -> None:
    """Until the period ends, pin as soon as the node's pods change (a container started)."""
    deadline = anyio.current_time() + period
    while (remaining := deadline - anyio.current_time()) > 0:
        with anyio.move_on_after(remaining):
            await enforcer.changed.wait()
        if enforcer.changed.is_set():
            enforcer.changed = anyio.Event()
            enforcer.enforce(facts.static_cpu_manager, facts.numa_of_cpu)
