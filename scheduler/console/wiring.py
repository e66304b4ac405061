"""How `numasched simulate --serve` puts the console together, and the run command's console
options (the cluster's console is in cluster.py, which loads the Kubernetes client)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import attrs

from numasched.cache.cache import Cache
from numasched.conf.watch import ConfigSource
from numasched.scheduler.console.access import ClosedAccess, OpenAccess
from numasched.scheduler.console.gauges import NumaGauges
from numasched.scheduler.console.policy_store import PolicyStore, ReadOnlyPolicyStore
from numasched.scheduler.console.server import CacheViews, Console, PolicyAccess, write_request_for
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.metrics import SchedulerMetrics


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--console",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the NUMA console (/ui) and the policy API (/rest/scheduling/v1/numaaware) on the metrics "
        "address (default on)",
    )
    parser.add_argument(
        "--console-anonymous-reads",
        action="store_true",
        help="let the console pages and GET of the policy answer without a token (writes always need one)",
    )


@attrs.frozen(slots=True)
class ConsoleOptions:
    enabled: bool = True
    anonymous_reads: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConsoleOptions:
        return cls(
            enabled=getattr(args, "console", True), anonymous_reads=getattr(args, "console_anonymous_reads", False)
        )


DEFAULT_CONSOLE_OPTIONS = ConsoleOptions()


def simulation_console(
    cache: Cache, config_source: ConfigSource, metrics: SchedulerMetrics, registry: Registry | None = None
) -> Console:
    """The console of a simulated cluster: open to read; the policy cannot be changed (there is no
    cluster to review a write, and no scheduler running on to use it)."""
    reason = "a simulated cluster's configuration is fixed; change it with --config and simulate again"
    store = ReadOnlyPolicyStore("simulation", reason)
    access = PolicyAccess(OpenAccess(), ClosedAccess(reason), write_request_for("", ""))
    return assemble_console(cache, config_source, metrics, store, access, registry)


def assemble_console(
    cache: Cache,
    config_source: ConfigSource,
    metrics: SchedulerMetrics,
    store: PolicyStore,
    access: PolicyAccess,
    registry: Registry | None = None,
) -> Console:
    views = CacheViews(cache)
    generation: Callable[[], int] = lambda: config_source.generation  # noqa: E731 - read at each request
    metrics.watch_numa(NumaGauges(views.latest))
    return Console(views, config_source.current, generation, store, access, registry=registry)
