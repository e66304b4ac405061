"""The `numasched explain NAMESPACE/POD` command: load a cluster as `simulate` does, let the scheduler
place what it would (unless --as-is), then explain why the pod waits on every node. With
--kubeconfig the cluster is listed live instead (read only) and explained as it is.

The rendering is here too: a table (node, fits, reason, NUMA picture, what-if) or the JSON that
scheduler/explain.py builds (explain_pod's structure).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys

from numasched.cache.cache import Cache
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.cli_input_files import InputFileError
from numasched.conf.loader import ConfigError
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.explain import (
    Explanation,
    NodeVerdict,
    PodNotFound,
    explain_in_cache,
    explanation_json,
    numa_summary,
)
from numasched.scheduler.simulate import add_input_arguments, load_cluster, load_config, simulate


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="NAMESPACE/POD", help="the pod to explain (a bare name: namespace default)")
    add_input_arguments(parser)
    parser.add_argument("--output", choices=("table", "json"), default="table", help="report format")
    parser.add_argument("--scheduler-name", default="numasched", help="spec.schedulerName of the pods to schedule")
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="explain against the files as loaded, without first letting the scheduler place the pending pods",
    )
    parser.add_argument("--max-cycles", type=int, default=100, help="scheduling cycles to run before explaining")
    parser.add_argument("--no-what-if", action="store_true", help="skip the search for pods whose departure helps")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="explain against this live cluster (read only: lists Nodes, Pods, topologies, PodGroups, "
        "Queues, PriorityClasses) instead of YAML files; --cluster, --workload and --as-is do not apply",
    )
    parser.add_argument("--context", default=None, help="the kubeconfig context to use (default: its current one)")
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds allowed for each API request and for listing everything (live cluster only)",
    )


def pod_key(text: str) -> str:
    return text if "/" in text else f"default/{text}"


async def run_explain(args: argparse.Namespace) -> int:
    """The `numasched explain` command; the exit status is one of numasched.cli_exit_codes."""
    registry = default_registry(with_entry_points=True)
    try:
        config = load_config(args.config, registry)
    except ConfigError as error:
        print(f"numasched explain: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if args.kubeconfig:
        if args.cluster or args.workload or args.as_is:
            print("numasched explain: --cluster, --workload and --as-is do not go with --kubeconfig", file=sys.stderr)
            return EXIT_USAGE
        try:
            cache = await live_cache(args.kubeconfig, args.context, args.scheduler_name, args.request_timeout)
        except LiveConfigError as error:
            print(f"numasched explain: kubeconfig {args.kubeconfig}: {error}", file=sys.stderr)
            return EXIT_CONFIG
        except TimeoutError:
            print(
                f"numasched explain: the cluster was not listed within {args.request_timeout:g}s (--request-timeout)",
                file=sys.stderr,
            )
            return EXIT_FAILURE
    else:
        try:
            cluster = load_cluster(args)
        except InputFileError as error:
            print(f"numasched explain: {error}", file=sys.stderr)
            return EXIT_INPUT
        cache = cluster.cache
        if not args.as_is:
            await simulate(cluster, config, registry, max_cycles=args.max_cycles, progress=False)
    try:
        explanation = explain_in_cache(cache, config, registry, pod_key(args.pod), with_what_if=not args.no_what_if)
    except PodNotFound as error:
        print(f"numasched explain: {error}", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(render(explanation, args.output))
    return EXIT_OK


class LiveConfigError(Exception):
    """The kubeconfig names no usable cluster (a missing context, no server)."""


async def live_cache(kubeconfig: str, context: str | None, scheduler_name: str, timeout_s: float) -> Cache:
    """A cache filled by listing the cluster once, as the scheduler's informers do (the same
    kinds and conversions); the informers are stopped once every kind is listed. Raises
    TimeoutError when that takes longer than timeout_s, LiveConfigError for an unusable kubeconfig."""
    import anyio
    from kubernetes_asyncio import client
    from kubernetes_asyncio.config import ConfigException

    from numasched.cache.kube.informer import InformerTiming
    from numasched.cache.kube.resources import build_informers
    from numasched.scheduler.runner import client_configuration

    cache = Cache((scheduler_name,))
    try:
        configuration = await client_configuration(kubeconfig, context)
    except ConfigException as error:
        raise LiveConfigError(str(error)) from error
    async with client.ApiClient(configuration) as api:
        informers = build_informers(api, cache, timing=InformerTiming(request_timeout=timeout_s))
        # The deadline is outside the task group: on expiry it cancels the informers too, and
        # raises TimeoutError itself (not wrapped in an exception group).
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as group:
                for informer in informers:
                    group.start_soon(informer.run)
                for informer in informers:
                    await informer.synced.wait()
                group.cancel_scope.cancel()
    return cache


def render(explanation: Explanation, output: str) -> str:
    if output == "json":
        return json.dumps(explanation_json(explanation), indent=2) + "\n"
    return render_table(explanation)


def _what_if_cell(verdict: NodeVerdict) -> str:
    if verdict.fits:
        return "-"
    if verdict.what_if is None:
        return verdict.what_if_note or "-"
    return "fits without " + ", ".join(verdict.what_if)


def render_table(explanation: Explanation) -> str:
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    head = f"pod {explanation.pod}"
    if explanation.placed_on:
        head += f" (the scheduler placed it on {explanation.placed_on}; judged here as if still pending)"
    console.print(head, highlight=False)
    if not explanation.pre_predicate.passed:
        console.print(
            f"refused before any node by {explanation.pre_predicate.plugin}: {explanation.summary}", highlight=False
        )
        return buffer.getvalue()
    table = Table(title=explanation.summary, title_justify="left")
    for column in ("NODE", "FITS", "REASON", "NUMA (free/requested)", "WHAT-IF"):
        table.add_column(column, overflow="fold")
    for verdict in explanation.nodes:
        reason = f"{verdict.plugin}: {verdict.reason}" if verdict.plugin else verdict.reason
        table.add_row(
            verdict.node,
            "yes" if verdict.fits else "no",
            reason or "-",
            numa_summary(verdict),
            _what_if_cell(verdict),
        )
    console.print(table)
    return buffer.getvalue()
