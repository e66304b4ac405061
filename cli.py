"""The `numasched` command: simulate, run (the scheduler), exporter (the node's topology) and agent
(the exporter that also pins the containers numasched decided).

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

# (name, help, description) of each command. A command's own arguments come from its module,
# which for `run` and `exporter` imports the Kubernetes client and gRPC stubs (seconds of start-up):
# only the command being run has its module imported, so `--help` and `simulate` stay light.
COMMANDS = (
    (
        "simulate",
        "schedule a cluster described in YAML files, in memory, and print the placements",
        "Run the real scheduler on a simulated cluster until nothing more can be placed.",
    ),
    (
        "explain",
        "say why one pod waits: every node's first failing check, its NUMA picture and what-if",
        "Load a cluster as simulate does, let the scheduler place what it would, then explain one pod "
        "node by node: the first failing check, per NUMA node free against requested resources, and "
        "the fewest pods whose departure would let it in (docs/explain.md).",
    ),
    (
        "defrag",
        "plan pod moves that free aligned blocks of a shape (8 GPUs on one node, 4 GPUs and 32 CPUs on one NUMA node)",
        "Load a cluster as simulate does (or list a live one), and compute the fewest pod moves that free the most "
        "aligned blocks of the requested shape, respecting PodDisruptionBudgets and priorities; a dry run unless "
        "--apply (docs/defrag.md).",
    ),
    (
        "run",
        "run the scheduler against a Kubernetes cluster",
        "Watch the cluster and schedule every pod whose spec.schedulerName is ours.",
    ),
    (
        "exporter",
        "run the node agent that discovers and publishes this node's topology",
        "Discover NUMA, CPU, memory, GPU and NIC topology and publish a Numatopology object.",
    ),
    (
        "agent",
        "run the exporter and pin the cgroups of the containers numasched decided (replaces the exporter)",
        "Publish this node's topology as the exporter does, pin the CPUs and memory NUMA nodes of every "
        "container numasched decided and the kubelet does not pin, and report decisions the node did not follow.",
    ),
)


def _add_command_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    if command == "simulate":
        from numasched.scheduler.simulate import add_simulate_arguments

        add_simulate_arguments(parser)
    elif command == "explain":
        from numasched.scheduler.explain_command import add_explain_arguments

        add_explain_arguments(parser)
    elif command == "defrag":
        from numasched.scheduler.defrag_command import add_defrag_arguments

        add_defrag_arguments(parser)
    elif command == "run":
        from numasched.scheduler.runner import add_run_arguments

        add_run_arguments(parser)
    elif command == "agent":
        from numasched.exporter.enforce_command import add_agent_arguments

        add_agent_arguments(parser)
    else:
        from numasched.exporter.command import add_exporter_arguments

        add_exporter_arguments(parser)


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command named on the command line, if any (the first argument that is one)."""
    names = {name for name, _, _ in COMMANDS}
    return next((argument for argument in argv if argument in names), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with argv, only the command argv names gets its arguments (and its imports),
    without it every command does."""
    parser = argparse.ArgumentParser(
        prog="numasched",
        description="Topology-aware secondary scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"numasched {__version__}")
    parser.add_argument("--log-level", choices=LEVELS, help="log level (default: warning for simulate, else info)")
    parser.add_argument("--log-format", choices=("console", "json"), default=None, help="log format on stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = chosen_command(argv) if argv is not None else None
    for name, help_text, description in COMMANDS:
        command_parser = commands.add_parser(name, help=help_text, description=description)
        if argv is None or name == chosen:
            _add_command_arguments(name, command_parser)
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
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(arguments).parse_args(arguments)
    import anyio

    problem = kubeconfig_problem(args)
    if problem:
        print(f"numasched {args.command}: {problem}", file=sys.stderr)
        return EXIT_CONFIG

    simulating = args.command in ("simulate", "explain", "defrag")
    configure_logging(
        args.log_level or ("warning" if simulating else "info"),
        args.log_format or ("console" if simulating else "json"),
    )

    if args.command == "simulate":
        from numasched.scheduler.simulate import run_simulate

        return anyio.run(run_simulate, args)
    if args.command == "explain":
        from numasched.scheduler.explain_command import run_explain

        return anyio.run(run_explain, args)
    if args.command == "defrag":
        from numasched.scheduler.defrag_command import run_defrag

        return anyio.run(run_defrag, args)
    if args.command == "run":
        from numasched.scheduler.runner import run_scheduler

        return anyio.run(run_scheduler, args)
    if args.command == "agent":
        from numasched.exporter.enforce_command import run_agent

        return anyio.run(run_agent, args)
    from numasched.exporter.command import run_exporter

    return anyio.run(run_exporter, args)


if __name__ == "__main__":
    sys.exit(main())
