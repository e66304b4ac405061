"""The `numasched defrag --shape COUNTxRESOURCE[,...]` command: plan pod moves that free aligned
blocks of a shape (scheduler/defrag.py), on YAML dumps as `simulate` loads them or on a live
cluster (--kubeconfig, read only); print the plan as a table, JSON or YAML; with --apply (live
only) evict the plan's pods through the Eviction API one step at a time, re-checking before each
step that it still holds.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from numasched.api.disruption_budget import DisruptionBudget
from numasched.api.task import TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.convert_pdb import ConversionError, pdb_from_object
from numasched.cache.eviction import Evictor, EvictRequest, EvictStatus
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.cli_input_files import InputFileError
from numasched.conf.loader import ConfigError
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.defrag import (
    DefragOptions,
    Move,
    Plan,
    Shape,
    ShapeError,
    defrag_in_cache,
    parse_shape,
    pending_copy,
    place_copy,
    plan_json,
)
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.simulate import add_input_arguments, load_cluster, load_config, simulate

REASON = "defragmentation: freeing aligned blocks of {shape} on node {target} (numasched defrag)"


def add_defrag_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        action="append",
        required=True,
        metavar="COUNTxRESOURCE[,...]",
        help="the block to free, e.g. 8xnvidia.com/gpu or 4xnvidia.com/gpu,32xcpu (aligned as the node's "
        "topology manager policy requires); repeat for several shapes, planned one after another",
    )
    add_input_arguments(parser)
    parser.add_argument("--output", choices=("table", "json", "yaml"), default="table", help="report format")
    parser.add_argument("--scheduler-name", default="numasched", help="spec.schedulerName of the pods to schedule")
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="plan on the files as loaded, without first letting the scheduler place the pending pods",
    )
    parser.add_argument("--max-cycles", type=int, default=100, help="scheduling cycles to run before planning")
    parser.add_argument(
        "--max-priority",
        type=int,
        default=0,
        help="never move a pod whose priority is above this (system-critical pods never move)",
    )
    parser.add_argument("--max-moves", type=int, default=16, help="evictions one plan may hold at most")
    parser.add_argument(
        "--max-moves-per-node", type=int, default=8, help="pods moved off one target node at most (search bound)"
    )
    parser.add_argument("--blocks", type=int, default=None, help="stop once this many blocks are freed")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="plan against this live cluster (lists Nodes, Pods, topologies, PodGroups, Queues, PriorityClasses "
        "and PodDisruptionBudgets) instead of YAML files; --cluster, --workload and --as-is do not apply",
    )
    parser.add_argument("--context", default=None, help="the kubeconfig context to use (default: its current one)")
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds allowed for each API request, each eviction and each listing of the cluster (live only)",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="evict the plan's pods through the Eviction API, one step at a time, checking before each that it "
        "still holds (live cluster only; one --shape)",
    )


def _options(args: argparse.Namespace) -> DefragOptions | str:
    for name in ("max_moves", "max_moves_per_node"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.blocks is not None and args.blocks < 1:
        return "--blocks must be at least 1"
    if args.request_timeout <= 0:
        return "--request-timeout must be more than 0"
    return DefragOptions(
        max_priority=args.max_priority,
        max_moves=args.max_moves,
        max_moves_per_node=args.max_moves_per_node,
        wanted_blocks=args.blocks,
    )


def _usage(problem: str) -> int:
    print(f"numasched defrag: {problem}", file=sys.stderr)
    return EXIT_USAGE


async def run_defrag(args: argparse.Namespace) -> int:
    """The `numasched defrag` command; the exit status is one of numasched.cli_exit_codes."""
    try:
        shapes = [parse_shape(text) for text in args.shape]
    except ShapeError as error:
        return _usage(str(error))
    options = _options(args)
    if isinstance(options, str):
        return _usage(options)
    if args.apply and (not args.kubeconfig or len(shapes) != 1):
        return _usage("--apply needs --kubeconfig (a live cluster) and exactly one --shape")
    registry = default_registry(with_entry_points=True)
    try:
        config = load_config(args.config, registry)
    except ConfigError as error:
        print(f"numasched defrag: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if args.kubeconfig:
        if args.cluster or args.workload or args.as_is:
            return _usage("--cluster, --workload and --as-is do not go with --kubeconfig")
        return await _run_live(args, shapes, options, config, registry)
    try:
        cluster = load_cluster(args)
    except InputFileError as error:
        print(f"numasched defrag: {error}", file=sys.stderr)
        return EXIT_INPUT
    if not args.as_is:
        await simulate(cluster, config, registry, max_cycles=args.max_cycles, progress=False)
    budgets = read_budgets(cluster.objects["PodDisruptionBudget"].values())
    plans = [
        defrag_in_cache(
            cluster.cache, config, registry, shape, scheduler_name=args.scheduler_name, budgets=budgets, options=options
        )
        for shape in shapes
    ]
    sys.stdout.write(render(plans, args.output))
    return EXIT_OK


def budget_for_eviction(obj: Mapping[str, Any]) -> tuple[DisruptionBudget, list[str]]:
    """A PodDisruptionBudget object as defrag plans with it: the cache's reading (pdb_from_object:
    policy/v1's selectors, as the Eviction API that `--apply` goes through enforces them), and a
    budget with any field that cannot be read allows no disruption, so the pods it may cover stay.
    A spec that is not an object is such a field: which pods it meant cannot be told, so it covers
    every pod of its namespace.

    Raises ConversionError when the object has no name."""
    budget, problems = pdb_from_object(obj)
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        problems.append(f"spec: expected an object, got {type(spec).__name__}")
        budget = attrs.evolve(budget, match_labels={}, match_expressions=(), selects=True)
    if problems:
        budget = attrs.evolve(budget, disruptions_allowed=0)
    return budget, problems


def read_budgets(objects: Iterable[Mapping[str, Any]]) -> list[DisruptionBudget]:
    """budget_for_eviction over the objects; each one not fully read is named on stderr."""
    budgets: list[DisruptionBudget] = []
    for obj in objects:
        try:
            budget, problems = budget_for_eviction(obj)
        except ConversionError as error:
            print(f"numasched defrag: {error}; skipped", file=sys.stderr)
            continue
        budgets.append(budget)
        if problems:
            held = (
                f"all pods of namespace {budget.namespace}"
                if budget.selects and not budget.match_labels and not budget.match_expressions
                else "the pods it selects"
            )
            print(
                f"numasched defrag: PodDisruptionBudget {budget.key}: {'; '.join(problems)}. "
                f"For defrag it allows no disruption: {held} stay where they are",
                file=sys.stderr,
            )
    return budgets


async def _run_live(
    args: argparse.Namespace,
    shapes: Sequence[Shape],
    options: DefragOptions,
    config: SchedulerConfig,
    registry: Registry,
) -> int:
    from numasched.scheduler.explain_command import LiveConfigError

    try:
        cache, budgets = await live_state(args.kubeconfig, args.context, args.scheduler_name, args.request_timeout)
    except LiveConfigError as error:
        print(f"numasched defrag: kubeconfig {args.kubeconfig}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except TimeoutError:
        print(
            f"numasched defrag: the cluster was not listed within {args.request_timeout:g}s (--request-timeout)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    except ListError as error:
        print(f"numasched defrag: {error}", file=sys.stderr)
        return EXIT_FAILURE
    plans = [
        defrag_in_cache(
            cache, config, registry, shape, scheduler_name=args.scheduler_name, budgets=budgets, options=options
        )
        for shape in shapes
    ]
    sys.stdout.write(render(plans, args.output, applying=args.apply))
    if not args.apply:
        return EXIT_OK
    sys.stdout.flush()
    return await _apply_live(args, plans[0], config, registry)


class ListError(Exception):
    """The cluster answered a listing with an error."""


async def list_budgets(api: Any, timeout_s: float) -> list[DisruptionBudget]:
    """Every PodDisruptionBudget (policy/v1); none when the cluster serves no policy/v1 (404)."""
    from kubernetes_asyncio import client

    response: Any = await client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces(
        _preload_content=False, _request_timeout=timeout_s
    )
    if response.status == 404:
        response.release()
        print("numasched defrag: the cluster serves no policy/v1 PodDisruptionBudgets; none apply", file=sys.stderr)
        return []
    body = await response.read()
    if not 200 <= response.status < 300:
        raise ListError(f"listing PodDisruptionBudgets: HTTP {response.status}: {body[:200].decode(errors='replace')}")
    try:
        document = json.loads(body)
    except ValueError as error:
        raise ListError(f"listing PodDisruptionBudgets: the answer is not JSON ({error})") from None
    items = document.get("items") if isinstance(document, Mapping) else None
    return read_budgets(item for item in items or [] if isinstance(item, Mapping))


async def live_state(
    kubeconfig: str, context: str | None, scheduler_name: str, timeout_s: float
) -> tuple[Cache, list[DisruptionBudget]]:
    """The cluster listed once (explain's live cache) and its PodDisruptionBudgets; TimeoutError
    past timeout_s for either."""
    import anyio
    from kubernetes_asyncio import client

    from numasched.scheduler.explain_command import live_cache
    from numasched.scheduler.runner import client_configuration

    cache = await live_cache(kubeconfig, context, scheduler_name, timeout_s)
    configuration = await client_configuration(kubeconfig, context)
    async with client.ApiClient(configuration) as api:
        with anyio.fail_after(timeout_s):
            budgets = await list_budgets(api, timeout_s)
    return cache, budgets


def step_problem(cache: Cache, config: SchedulerConfig, registry: Registry, move: Move) -> str:
    """Why the move no longer holds on the cluster as it is now ("" when it does): the pod is gone,
    replaced or elsewhere, or its destination no longer takes it."""
    ssn = Session(cache.snapshot(), config, registry)
    ssn.open()
    try:
        node = ssn.nodes.get(move.node)
        task = None if node is None else node.tasks.get(move.uid)
        if task is None:
            return f"pod {move.pod} (uid {move.uid}) is no longer on node {move.node}"
        if task.status not in (TaskStatus.RUNNING, TaskStatus.BOUND):
            return f"pod {move.pod} is {task.status.name.lower()}, not running"
        destination = ssn.nodes.get(move.destination)
        if destination is None:
            return f"node {move.destination} is gone"
        pending = pending_copy(task)
        if not place_copy(ssn, pending, destination.clone(), move.uid):
            reason = ssn.predicate(pending, destination)
            why = reason.reason if not reason.passed else "not enough room"
            return f"pod {move.pod} no longer fits node {move.destination} ({why})"
        return ""
    finally:
        ssn.close()


async def apply_plan(
    plan: Plan,
    evictor: Evictor,
    refresh: Callable[[], Awaitable[Cache]],
    check: Callable[[Cache, Move], str],
    report: Callable[[str], None],
) -> tuple[int, str]:
    """Evict the plan's pods in order; before each eviction refresh the view of the cluster and
    check the step still holds. Returns (evictions done, why it stopped or "")."""
    moves = [(step, move) for step in plan.steps for move in step.moves]
    for index, (step, move) in enumerate(moves, start=1):
        head = f"step {index}/{len(moves)}: {move.pod} from {move.node} to {move.destination}"
        cache = await refresh()
        problem = check(cache, move)
        if problem:
            return index - 1, f"{head}: {problem}; stopped after {index - 1} of {len(moves)} evictions"
        task = None
        for node in cache.snapshot().nodes.values():
            task = node.tasks.get(move.uid, task)
        if task is None:
            return index - 1, f"{head}: pod {move.pod} vanished; stopped after {index - 1} of {len(moves)} evictions"
        reason = REASON.format(shape=plan.shape, target=step.target)
        outcome = await evictor.evict(EvictRequest(task, move.node, reason))
        if outcome.status is not EvictStatus.EVICTED:
            detail = f"{outcome.status}: {outcome.message}" if outcome.message else str(outcome.status)
            return (
                index - 1,
                f"{head}: eviction not done ({detail}); stopped after {index - 1} of {len(moves)} evictions",
            )
        report(f"{head}: evicted")
    return len(moves), ""


async def _apply_live(args: argparse.Namespace, plan: Plan, config: SchedulerConfig, registry: Registry) -> int:
    import anyio
    from kubernetes_asyncio import client

    from numasched.cache.kube.evictor import KubeEvictor
    from numasched.scheduler.explain_command import live_cache
    from numasched.scheduler.runner import client_configuration

    if not plan.moves:
        print("numasched defrag: nothing to apply (the plan holds no move)", file=sys.stderr)
        return EXIT_OK

    async def refresh() -> Cache:
        return await live_cache(args.kubeconfig, args.context, args.scheduler_name, args.request_timeout)

    def check(cache: Cache, move: Move) -> str:
        return step_problem(cache, config, registry, move)

    def report(line: str) -> None:
        print(f"numasched defrag: {line}", file=sys.stderr)

    configuration = await client_configuration(args.kubeconfig, args.context)
    async with client.ApiClient(configuration) as api:
        evictor = KubeEvictor(api, scheduler_name=args.scheduler_name, timeout=args.request_timeout)
        try:
            # Each listing and each eviction is bounded by --request-timeout; the whole run by their sum.
            with anyio.fail_after(args.request_timeout * 3 * (len(plan.moves) + 1)):
                done, stopped = await apply_plan(plan, evictor, refresh, check, report)
        except TimeoutError:
            print(
                "numasched defrag: --apply did not finish within its time "
                f"(--request-timeout {args.request_timeout:g}s per request); evictions done so far stand",
                file=sys.stderr,
            )
            return EXIT_FAILURE
    if stopped:
        print(f"numasched defrag: {stopped}", file=sys.stderr)
        return EXIT_FAILURE
    print(
        f"numasched defrag: {done} pod(s) evicted; the scheduler places their replacements "
        f"(the plan predicts {plan.freed} block(s) of {plan.shape} freed)",
        file=sys.stderr,
    )
    return EXIT_OK


def render(plans: Sequence[Plan], output: str, *, applying: bool = False) -> str:
    document = plan_json(plans)
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(document, sort_keys=False, width=120))
    return "".join(render_table(plan, applying=applying) for plan in plans)


def _stranded(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {resource}" for resource, count in counts.items()) or "-"


def render_table(plan: Plan, *, applying: bool = False) -> str:
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    console.print(
        f"shape {plan.shape}: {plan.blocks_before} free block(s) now, {plan.blocks_after} after the plan "
        f"(+{plan.freed}) with {len(plan.moves)} move(s); stranded: {_stranded(plan.stranded_before)} now, "
        f"{_stranded(plan.stranded_after)} after",
        highlight=False,
    )
    if plan.moves:
        table = Table(
            title=f"plan ({plan.strategy}; dry run: nothing is evicted without --apply)", title_justify="left"
        )
        for column in ("STEP", "EVICT POD", "FROM", "HOLDS", "PREDICTED TO", "FREES ON"):
            table.add_column(column, overflow="fold")
        index = 0
        for step in plan.steps:
            for move in step.moves:
                index += 1
                table.add_row(
                    str(index),
                    move.pod,
                    move.node,
                    move.holds or "-",
                    move.destination,
                    f"{step.target} (+{step.gained})",
                )
        console.print(table)
    else:
        console.print("no move frees a block of this shape", highlight=False)
    if plan.kept:
        kept = "; ".join(f"{count} {why}" for why, count in plan.kept.items())
        console.print(f"pods that stay: {kept}", highlight=False)
    return buffer.getvalue()
