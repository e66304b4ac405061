"""`numasched --help` and `numasched simulate` import neither the Kubernetes client nor the gRPC
stubs: only the command being run has its module imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from numasched.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted({{name.split(".")[0] for name in sys.modules if name.startswith(("kubernetes_asyncio", "grpc"))}})
print("HEAVY:" + ",".join(heavy))
"""


def heavy_modules_after(argv: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=60, check=True
    )
    marked = [line for line in result.stdout.splitlines() if line.startswith("HEAVY:")]
    assert len(marked) == 1, result.stdout[-2000:]
    return marked[0].removeprefix("HEAVY:")


@pytest.mark.parametrize(
    "argv", [["--help"], ["simulate", "--help"], ["simulate", "--output", "json"], ["defrag", "--help"]]
)
def test_help_and_simulate_stay_light(argv: list[str]) -> None:
    assert heavy_modules_after(argv) == ""


def test_run_help_still_lists_its_arguments() -> None:
    # The command being run does import its module (and with it the client).
    assert heavy_modules_after(["run", "--help"]) == "kubernetes_asyncio"
