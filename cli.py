"""The `numasched` command: simulate, run (the scheduler) and exporter (the node agent).

Exit codes are numasched.cli_exit_codes: bad input is one line on stderr and a documented code,
never a Python traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from numasched import __version__
from numasched.cli_exit_codes import EXIT_CONFIG
from numasched.cli_input_files import InputFileError, read_yaml_file
from numasched.logconfig import LEVELS, configure_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="numasched",
        description="Topology-aware secondary scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"numasched {__version__}")
    parser.add_argument("--log-level", choices=LEVELS, help="log level (default: warning for simulate, else info)")
    parser.add_argument("--log-format", choices=("console", "json"), default=None, help="log format on stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from numasched.scheduler.simulate import add_simulate_arguments

    add_simulate_arguments(
        commands.add_parser(
            "simulate",
            help="schedule a cluster described in YAML files, in memory, and print the placements",
            description="Run the real scheduler on a simulated cluster until nothing more can be placed.",
        )
    )
    from numasched.scheduler.runner import add_run_arguments

    add_run_arguments(
        commands.add_parser(
            "run",
            help="run the scheduler against a Kubernetes cluster",
            description="Watch the cluster and schedule every pod whose spec.schedulerName is ours.",
        )
    )
    from numasched.exporter.command import add_exporter_arguments

    add_exporter_arguments(
        commands.add_parser(
            "exporter",
            help="run the node agent that discovers and publishes this node's topology",
            description="Discover NUMA, CPU, memory, GPU and NIC topology and publish a Numatopology object.",
        )
    )
    return parser


def kubeconfig_problem(args: argparse.Namespace) -> str:
    """Why the kubeconfig named on the command line cannot be used ("" when it can, or none is named).

    The Kubernetes client raises assorted exceptions (a YAML error among them) for a bad file; a
    strict read first gives one clear line instead. Like the client (and kubectl), the value may
    list several files separated by the path separator (KUBECONFIG=a:b); files that do not exist
    are skipped, but at least one must.
    """
    value = getattr(args, "kubeconfig", None)
    if not value:
        return ""
    paths = [Path(part).expanduser() for part in str(value).split(os.pathsep) if part]
    present = [path for path in paths if path.exists()]
    if not present:
        return f"kubeconfig {value}: no such file"
    for path in present:
        try:
            read_yaml_file(path)
        except InputFileError as error:
            return f"kubeconfig {error}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import anyio

    problem = kubeconfig_problem(args)
    if problem:
        print(f"numasched {args.command}: {problem}", file=sys.stderr)
        return EXIT_CONFIG

    simulating = args.command == "simulate"
    configure_logging(
        args.log_level or ("warning" if simulating else "info"),
        args.log_format or ("console" if simulating else "json"),
    )

    if args.command == "simulate":
        from numasched.scheduler.simulate import run_simulate

        return anyio.run(run_simulate, args)
    if args.command == "run":
        from numasched.scheduler.runner import run_scheduler

        return anyio.run(run_scheduler, args)
    from numasched.exporter.command import run_exporter

    return anyio.run(run_exporter, args)


if __name__ == "__main__":
    sys.exit(main())
