"""`numasched simulate --serve`: a bad or taken address is one line and exit code 3, after the
report; a good one serves the console until SIGTERM, then exits with the run's own code."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_OK

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "numasched", "simulate", "--no-progress", "--output", "json"]


def test_a_malformed_address_is_refused_after_the_report() -> None:
    done = subprocess.run([*COMMAND, "--serve", "localhost:http"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == EXIT_CONFIG
    assert '"summary"' in done.stdout  # the report came first
    assert done.stderr.strip().splitlines()[-1] == (
        "numasched simulate: --serve: metrics address must be HOST:PORT, got 'localhost:http'"
    )


def test_a_taken_port_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*COMMAND, "--serve", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
    assert done.returncode == EXIT_CONFIG
    assert f"numasched simulate: cannot serve on 127.0.0.1:{port}:" in done.stderr
    assert "Traceback" not in done.stderr


def test_serves_until_sigterm_then_exits_cleanly() -> None:
    process = subprocess.Popen(
        [*COMMAND, "--serve", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert process.stderr is not None
    try:
        url = ""
        for line in process.stderr:
            found = re.search(r"console at (http://\S+/ui/)", line)
            if found:
                url = found.group(1)
                break
        with urllib.request.urlopen(url.replace("/ui/", "/rest/scheduling/v1/numaaware"), timeout=10) as answer:
            assert b'"status": "open"' in answer.read()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == EXIT_OK
    finally:
        process.kill()
        process.stderr.close()
