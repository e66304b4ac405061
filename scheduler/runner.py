"""`numasched run`: the scheduler against a real Kubernetes API server.

Informers feed the cache; the leader (a Lease) runs the scheduling loop, which binds through the
API; /healthz, /readyz and /metrics answer on the metrics address. SIGTERM stops deciding at once,
lets the binds already sent finish within the shutdown grace, releases the Lease and exits.
Losing the Lease stops scheduling at once; the instance then stands for election again (its
informers, and so its cache, stay warm), rather than exiting.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import structlog
from kubernetes_asyncio import client, config

from numasched.cache.binder import BindStatus
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.binder import DEFAULT_REPEAT_INTERVAL_S, KubeBinder, KubeStatusReporter
from numasched.cache.kube.evictor import KubeEvictor
from numasched.cache.kube.informer import DEFAULT_INFORMER_TIMING, EventSink, Informer, InformerTiming
from numasched.cache.kube.problems import ObjectProblemWriter
from numasched.cache.kube.queue_status import KubeQueueStatusWriter
from numasched.cache.kube.resources import ConfigMapFeed, ConfigMapRef, build_informers
from numasched.cli_durations import parse_duration
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE
from numasched.cli_exit_codes import EXIT_OK as EXIT_OK  # re-exported: tests and callers read it here
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE_NAME
from numasched.conf.loader import ConfigError
from numasched.conf.watch import ConfigSource, watch_config_file
from numasched.logconfig import configure_logging
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.console.cluster import cluster_console
from numasched.scheduler.console.wiring import DEFAULT_CONSOLE_OPTIONS, ConsoleOptions, add_console_arguments
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.status import PluginFault
from numasched.scheduler.health import HealthServer
from numasched.scheduler.leader import (
    DEFAULT_LEASE_TIMING,
    DEFAULT_RELEASE_TIMEOUT_S,
    LeaderElector,
    LeaseTiming,
    LostLease,
    default_identity,
)
from numasched.scheduler.loop import (
    DEFAULT_BACKOFF,
    DEFAULT_BIND_CONCURRENCY,
    DEFAULT_REPORT_TIMEOUT_S,
    DEFAULT_SHUTDOWN_GRACE_S,
    BackoffPolicy,
    CycleResult,
    CycleTrigger,
    PodBackoff,
    run_loop,
)
from numasched.scheduler.loop_events import ClusterChange, ClusterChanges
from numasched.scheduler.loop_unschedulable import DEFAULT_FLUSH_AFTER_S, RequeuePolicy, UnschedulablePods
from numasched.scheduler.metrics import SchedulerMetrics

log = structlog.get_logger("numasched.runner")

# The shutdown grace running out (work still in flight) ends the process with EXIT_FAILURE.

# Namespace of the pod, from the downward API or the service account mount.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG"), help="kubeconfig file; in-cluster config when absent"
    )
    parser.add_argument("--context", default=None, help="kubeconfig context to use")
    parser.add_argument(
        "--scheduler-name",
        action="append",
        dest="scheduler_names",
        help="schedulerName of the pods to place (repeatable; default numasched)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="volcano-scheduler.conf file (reloaded when it changes)")
    source.add_argument(
        "--config-map", type=ConfigMapRef.parse, help="NAMESPACE/NAME[:KEY] of the scheduler ConfigMap (watched)"
    )
    parser.add_argument(
        "--schedule-period",
        type=parse_duration,
        default=1.0,
        help="longest wait between cycles (default 1s); a new pod starts one at once",
    )
    parser.add_argument(
        "--leader-elect", action=argparse.BooleanOptionalAction, default=True, help="run leader election (default on)"
    )
    parser.add_argument("--lease-name", default="numasched", help="name of the Lease (default numasched)")
    parser.add_argument(
        "--lease-namespace", default=None, help="namespace of the Lease (default: the pod's, else kube-system)"
    )
    parser.add_argument("--lease-duration", type=parse_duration, default=15.0)
    parser.add_argument("--renew-deadline", type=parse_duration, default=10.0)
    parser.add_argument("--retry-period", type=parse_duration, default=2.0)
    parser.add_argument("--identity", default=None, help="leader election identity (default host_pid_random)")
    parser.add_argument("--metrics-addr", default=":10351", help="HOST:PORT for /healthz /readyz /metrics; '' disables")
    parser.add_argument(
        "--bind-concurrency", type=int, default=DEFAULT_BIND_CONCURRENCY, help="binds in flight at once"
    )
    parser.add_argument("--request-timeout", type=parse_duration, default=10.0, help="timeout of every API call")
    parser.add_argument(
        "--event-repeat-interval",
        type=parse_duration,
        default=DEFAULT_REPEAT_INTERVAL_S,
        help="min time between identical unschedulable reports for a pod",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=parse_duration,
        default=DEFAULT_SHUTDOWN_GRACE_S,
        help="time the binds in flight get to finish on SIGTERM (default 5s)",
    )
    parser.add_argument(
        "--pod-initial-backoff",
        type=parse_duration,
        default=DEFAULT_BACKOFF.initial_s,
        help="first backoff of a pod that did not fit or whose plugins raised; doubles per attempt (default 1s)",
    )
    parser.add_argument(
        "--pod-max-backoff",
        type=parse_duration,
        default=DEFAULT_BACKOFF.max_s,
        help="longest backoff of a pod that did not fit or whose plugins raised (default 10s)",
    )
    parser.add_argument(
        "--pod-max-unschedulable",
        type=parse_duration,
        default=DEFAULT_FLUSH_AFTER_S,
        help="longest a pod that did not fit waits for a cluster change before it is tried again (default 60s)",
    )
    add_console_arguments(parser)


@attrs.frozen(slots=True)
class RunOptions:
    scheduler_names: tuple[str, ...] = ("numasched",)
    config_file: Path | None = None
    config_map: ConfigMapRef | None = None
    schedule_period: float = 1.0
    leader_elect: bool = True
    lease_name: str = "numasched"
    lease_namespace: str = "kube-system"
    lease_timing: LeaseTiming = DEFAULT_LEASE_TIMING
    identity: str = ""
    metrics_addr: str = ""
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY
    request_timeout: float = 10.0
    event_repeat_interval: float = DEFAULT_REPEAT_INTERVAL_S
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE_S
    informer_timing: InformerTiming = DEFAULT_INFORMER_TIMING
    pod_backoff: BackoffPolicy = DEFAULT_BACKOFF
    max_unschedulable: float = DEFAULT_FLUSH_AFTER_S
    console: ConsoleOptions = DEFAULT_CONSOLE_OPTIONS

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        return cls(
            scheduler_names=tuple(args.scheduler_names or ("numasched",)),
            config_file=args.config,
            config_map=args.config_map,
            schedule_period=args.schedule_period,
            leader_elect=args.leader_elect,
            lease_name=args.lease_name,
            lease_namespace=args.lease_namespace or own_namespace(),
            lease_timing=LeaseTiming(args.lease_duration, args.renew_deadline, args.retry_period),
            identity=args.identity or default_identity(),
            metrics_addr=args.metrics_addr,
            bind_concurrency=max(1, args.bind_concurrency),
            request_timeout=args.request_timeout,
            event_repeat_interval=args.event_repeat_interval,
            shutdown_grace=args.shutdown_grace,
            informer_timing=InformerTiming(request_timeout=args.request_timeout),
            pod_backoff=BackoffPolicy(args.pod_initial_backoff, args.pod_max_backoff),
            max_unschedulable=args.pod_max_unschedulable,
            console=ConsoleOptions.from_args(args),
        )


def own_namespace() -> str:
    from_env = os.environ.get("POD_NAMESPACE")
    if from_env:
        return from_env
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "kube-system"
    except OSError:
        return "kube-system"


async def client_configuration(kubeconfig: str | None, context: str | None = None) -> client.Configuration:
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


class ArrivalWatch:
    """What the informers deliver to: the cache, and a cycle trigger pulled when a new pod of
    ours arrives without a node. Only additions trigger: an update (our own status report on a
    pod that does not fit) must not start cycle after cycle. With `unschedulable`, each event
    that could make a waiting pod fit (loop_events) is noted there, and pulls the trigger when a
    waiting pod may be tried at once."""

    def __init__(
        self,
        cache: EventSink,
        trigger: CycleTrigger,
        scheduler_names: frozenset[str],
        *,
        unschedulable: UnschedulablePods | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cache = cache
        self._trigger = trigger
        self._scheduler_names = scheduler_names
        self._unschedulable = unschedulable
        self._changes = ClusterChanges(scheduler_names)
        self._clock = clock

    def _waiting(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec")
        if not isinstance(spec, Mapping) or spec.get("nodeName"):
            return False
        return spec.get("schedulerName") in self._scheduler_names

    def _requeue(self, change: ClusterChange | None) -> None:
        if change is None or self._unschedulable is None or not len(self._unschedulable):
            return
        now = self._clock()
        if change.pod_uid:
            ready = self._unschedulable.pod_changed(change.pod_uid, now)
        else:
            ready = self._unschedulable.cluster_changed(change.reason, now)
        if ready:
            log.debug("waiting pods may fit now", change=change.reason)
            self._trigger.ask()

    def apply(self, event: ObjectEvent) -> None:
        self._cache.apply(event)
        if event.kind == "Pod" and event.type is EventType.ADDED and self._waiting(event.obj):
            self._trigger.ask()
        self._requeue(self._changes.judge(event))

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self._cache.replace(kind, objects)
        if kind == "Pod" and any(self._waiting(obj) for obj in objects):
            self._trigger.ask()
        self._requeue(self._changes.relisted(kind, objects))


class SchedulerRunner:
    """One scheduler instance: informers, health, leader election, the loop."""

    def __init__(
        self,
        api_client: client.ApiClient,
        options: RunOptions,
        *,
        registry: Registry | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.options = options
        self.registry = registry or default_registry(with_entry_points=True)
        self.metrics = metrics or SchedulerMetrics()
        self.cache = Cache(options.scheduler_names, on_problem=self._on_problem)
        self.binder = KubeBinder(api_client, timeout=options.request_timeout)
        self.reporter = KubeStatusReporter(
            api_client,
            scheduler_name=options.scheduler_names[0],
            timeout=options.request_timeout,
            repeat_interval=options.event_repeat_interval,
            instance=options.identity,
        )
        # Each victim costs up to three requests (condition, eviction, event) within the loop's
        # report bound, so each gets a third of it at most.
        self.evictor = KubeEvictor(
            api_client,
            scheduler_name=options.scheduler_names[0],
            timeout=min(options.request_timeout, DEFAULT_REPORT_TIMEOUT_S / 3),
        )
        self.queue_status = KubeQueueStatusWriter(api_client, timeout=options.request_timeout)
        # Bad objects the cache reports, written onto them (conditions, events) by the leader.
        self.problem_writer = ObjectProblemWriter(
            api_client, self.reporter, scheduler_names=options.scheduler_names, timeout=options.request_timeout
        )
        self.config_source = self._initial_config_source()
        self.config_feed = (
            ConfigMapFeed(self.config_source, options.config_map, self._report_rejected_config)
            if options.config_map is not None
            else None
        )
        # Set when a pod of ours arrives unbound: the loop decides it now, not at the next tick.
        self.cycle_trigger = CycleTrigger()
        # Pods that did not fit, until a cluster change (or the flush interval) and their backoff
        # let them be tried again; kept across terms of leadership, as the informers are.
        self.unschedulable = UnschedulablePods(RequeuePolicy(options.pod_backoff, options.max_unschedulable))
        self.informers: list[Informer] = build_informers(
            api_client,
            ArrivalWatch(
                self.cache,
                self.cycle_trigger,
                frozenset(options.scheduler_names),
                unschedulable=self.unschedulable,
            ),
            config_feed=self.config_feed,
            timing=options.informer_timing,
        )
        self.elector = (
            LeaderElector(
                api_client,
                namespace=options.lease_namespace,
                name=options.lease_name,
                identity=options.identity or None,
                timing=options.lease_timing,
                # Each Lease request has its own timeout, within the renew deadline (the elector
                # bounds a whole attempt by what is left of it).
                request_timeout=options.request_timeout,
            )
            if options.leader_elect
            else None
        )
        # The NUMA console and policy API answer on the metrics address (docs/console.md).
        self.console = (
            cluster_console(
                self.cache,
                self.config_source,
                self.metrics,
                api_client,
                options=options.console,
                config_map=options.config_map,
                config_file=options.config_file,
                known_plugins=self.registry.known_plugin_names(),
                known_actions=self.registry.known_action_names(),
                registry=self.registry,
                timeout_s=options.request_timeout,
            )
            if options.console.enabled
            else None
        )
        self.health = HealthServer(
            self.metrics,
            live=self._live,
            ready=self._ready,
            extensions=(self.console.install,) if self.console is not None else (),
            before_scrape=(self.console.views.view,) if self.console is not None else (),
        )
        self.stop_requested = anyio.Event()
        self._scheduling_stopped = anyio.Event()
        self._acquiring: anyio.CancelScope | None = None
        self.cycles = 0
        self._last_cycle_end = time.monotonic()
        # Kept across terms of leadership: a pod that made a plugin raise stays backed off.
        self.pod_backoff = PodBackoff(options.pod_backoff)
        self.terms = 0

    def _initial_config_source(self) -> ConfigSource:
        known_plugins = self.registry.known_plugin_names()
        known_actions = self.registry.known_action_names()
        if self.options.config_file is not None:
            return ConfigSource.from_file(self.options.config_file, known_plugins, known_actions)
        # With a ConfigMap, the defaults stand until its first good text arrives.
        return ConfigSource.from_text(DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE_NAME, known_plugins, known_actions)

    # -- probes ---------------------------------------------------------------------------------

    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def _live(self) -> str | None:
        if self.stop_requested.is_set():
            return None
        stalled = time.monotonic() - self._last_cycle_end
        leading = self._leading()
        # A cycle stuck for many periods means the loop is wedged; a restart is the cure.
        limit = max(60.0, 30 * self.options.schedule_period)
        if leading and self.cycles and stalled > limit:
            return f"no scheduling cycle finished for {stalled:.0f}s"
        return None

    def _ready(self) -> str | None:
        unsynced = [informer.kind for informer in self.informers if not informer.synced.is_set()]
        if unsynced:
            return f"waiting for the first list of: {', '.join(unsynced)}"
        return None

    # -- callbacks ------------------------------------------------------------------------------

    def _on_problem(self, kind: str, name: str, message: str) -> None:
        """A bad object, already logged by the cache: noted for the problem writer, which writes it
        onto the object as the leader (PodScheduled=False and FailedScheduling on our pods, a
        Warning event on other kinds), once per object version. Never raises: the cache calls it
        while an informer delivers."""
        self.problem_writer.note(kind, name, message)

    async def _report_rejected_config(self, obj: Mapping[str, Any], message: str) -> None:
        self.metrics.config_rejected.inc()
        metadata = obj.get("metadata") or {}
        reference = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": metadata.get("namespace", ""),
            "name": metadata.get("name", ""),
            "uid": metadata.get("uid", ""),
        }
        await self.reporter.event(reference, "Warning", "InvalidConfiguration", message)

    def _count_plugin_fault(self, fault: PluginFault) -> None:
        self.metrics.plugin_errors.labels(plugin=fault.plugin, extension_point=fault.extension_point).inc()

    def _on_cycle(self, result: CycleResult) -> None:
        self.cycles += 1
        self._last_cycle_end = time.monotonic()
        metrics = self.metrics
        for fault in result.session.plugin_faults:
            self._count_plugin_fault(fault)
        metrics.cycle_duration.observe(result.seconds)
        requests = {request.task.uid: request for request in result.session.bind_requests}
        now = time.time()
        for uid, outcome in result.outcomes.items():
            if outcome.status is BindStatus.BOUND:
                metrics.schedule_attempts.labels(result="scheduled").inc()
                metrics.attempt_duration.labels(result="scheduled").observe(result.seconds)
                request = requests.get(uid)
                if request is not None:
                    created = request.task.creation_timestamp
                    if created > 0:
                        metrics.e2e_duration.observe(max(0.0, now - created))
                    metrics.observe_placement(request.task.allocation)
            else:
                metrics.schedule_attempts.labels(result="error").inc()
                metrics.attempt_duration.labels(result="error").observe(result.seconds)
                metrics.bind_errors.labels(status=outcome.status.value).inc()
        failed = len(result.session.failed_by_plugin)
        if failed:
            metrics.schedule_attempts.labels(result="error").inc(failed)
        unschedulable = len(result.session.unschedulable) - failed
        if unschedulable:
            metrics.schedule_attempts.labels(result="unschedulable").inc(unschedulable)
            metrics.attempt_duration.labels(result="unschedulable").observe(result.seconds)
        metrics.pending_pods.set(len(result.session.unschedulable) + len(result.session.held_back))
        metrics.backoff_pods.set(len(self.pod_backoff))

    # -- running --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: decide nothing more, let the binds in flight finish within the grace,
        release the Lease, return."""
        if not self.stop_requested.is_set():
            log.info("stopping")
        self.stop_requested.set()
        if self._acquiring is not None:
            self._acquiring.cancel()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> int:
        """Run until stop() (exit 0). A lost Lease stops scheduling and the election goes on."""
        async with anyio.create_task_group() as background:
            if self.options.metrics_addr:
                await background.start(self.health.serve, self.options.metrics_addr)
            for informer in self.informers:
                background.start_soon(informer.run)
            if self.config_feed is not None:
                background.start_soon(self.config_feed.report)
            background.start_soon(self.problem_writer.run, self._leading)
            if self.options.config_file is not None:
                background.start_soon(watch_config_file, self.config_source, self.options.config_file)
            task_status.started()
            code = await self._elect_and_schedule()
            background.cancel_scope.cancel()
        log.info("stopped", exit_code=code, cycles=self.cycles)
        return code

    async def _wait_for_sync(self) -> bool:
        """Scheduling before every bound pod is known would hand out CPUs and devices twice."""
        for informer in self.informers:
            with anyio.CancelScope() as scope:
                self._acquiring = scope
                await informer.synced.wait()
            self._acquiring = None
            if self.stop_requested.is_set():
                return False
        log.info("caches synced", kinds=[informer.kind for informer in self.informers])
        return True

    async def _elect_and_schedule(self) -> int:
        if not await self._wait_for_sync():
            return EXIT_OK
        if self.elector is None:
            await self._schedule()
            return EXIT_OK
        elector = self.elector
        while not self.stop_requested.is_set():
            with anyio.CancelScope() as scope:
                self._acquiring = scope
                await elector.acquire()
            self._acquiring = None
            if self.stop_requested.is_set():
                break
            self.terms += 1
            try:
                await elector.hold(self._schedule)
            except LostLease as lost:
                # Scheduling stopped with the Lease (the loop was cancelled, binds not yet sent
                # are not sent). The informers keep the cache current, so this instance can lead
                # again as it is; it stands for election like any standby.
                log.error("leadership lost; scheduling stopped, standing for election again", error=str(lost))
            finally:
                self.metrics.leader.set(0)
        if elector.is_leader:
            with anyio.CancelScope(shield=True):
                await elector.release()
        return EXIT_OK

    async def _schedule(self) -> None:
        self.metrics.leader.set(1)
        log.info("scheduling", period=self.options.schedule_period, config=self.config_source.current().actions)
        await run_loop(
            self.cache,
            self.config_source.current,
            self.registry,
            self.binder,
            self.reporter,
            period_s=self.options.schedule_period,
            stop=self.stop_requested,
            bind_concurrency=self.options.bind_concurrency,
            on_cycle=self._on_cycle,
            backoff=self.pod_backoff,
            shutdown_grace_s=self.options.shutdown_grace,
            on_plugin_fault=self._count_plugin_fault,
            trigger=self.cycle_trigger,
            unschedulable=self.unschedulable,
            evictor=self.evictor,
            queue_status=self.queue_status,
        )


async def run_scheduler(args: argparse.Namespace) -> int:
    """The `numasched run` command (logging is set up by the caller: cli.main or main below)."""
    try:
        options = RunOptions.from_args(args)
    except ValueError as error:
        log.error("invalid options", error=str(error))
        return EXIT_CONFIG
    try:
        configuration = await client_configuration(args.kubeconfig, args.context)
    except (config.ConfigException, OSError, ValueError) as error:
        log.error("no usable Kubernetes client configuration", kubeconfig=args.kubeconfig, error=str(error))
        return EXIT_CONFIG
    async with client.ApiClient(configuration) as api_client:
        try:
            runner = SchedulerRunner(api_client, options)
        except ConfigError as error:
            log.error("invalid scheduler configuration", error=str(error))
            return EXIT_CONFIG
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for received in signals:
                        log.info("signal received; finishing in-flight work", signal=signal.Signals(received).name)
                        runner.stop()
                        # The binds' grace, the Lease release, and a second to exit.
                        group.start_soon(_force_exit_after, options.shutdown_grace + DEFAULT_RELEASE_TIMEOUT_S + 1.0)

            group.start_soon(stop_on_signal)
            code = await runner.run()
            group.cancel_scope.cancel()
    return code


async def _force_exit_after(grace: float) -> None:
    await anyio.sleep(grace)
    log.error("shutdown grace period over; exiting with work in flight", grace=grace)
    os._exit(EXIT_FAILURE)


def main(argv: list[str] | None = None) -> int:
    """`python -m numasched.scheduler.runner`: the run command alone, JSON logs at info."""
    parser = argparse.ArgumentParser(prog="numasched run", description=__doc__)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging("info", "json")
    return anyio.run(run_scheduler, args)


if __name__ == "__main__":
    raise SystemExit(main())
