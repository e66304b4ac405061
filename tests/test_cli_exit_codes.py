"""Every command as a script uses it: bad input is one line on stderr and a documented exit code.

The oracle is the table in numasched.cli_exit_codes (also in README.md and docs/simulate.md); a few
cases run the real `python -m numasched` process to show no traceback reaches the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numasched.cli import main
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_UNPLACED, EXIT_USAGE

CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: small}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
"""

FITS = """\
apiVersion: v1
kind: Pod
metadata: {name: fits, namespace: team}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {requests: {cpu: "2", memory: 1Gi}}
"""

TOO_LARGE = """\
---
apiVersion: v1
kind: Pod
metadata: {name: too-large, namespace: team}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {requests: {cpu: "64", memory: 1Gi}}
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: nobody
  user: {token: not-a-secret}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
"""


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def simulate(tmp_path: Path, *extra: str, workload: str = FITS) -> int:
    cluster = write(tmp_path, "cluster.yaml", CLUSTER)
    pods = write(tmp_path, "workload.yaml", workload)
    return main(["simulate", "--no-progress", "--cluster", str(cluster), "--workload", str(pods), *extra])


def one_line_error(capsys: pytest.CaptureFixture[str], command: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"numasched {command}: ")
    assert "Traceback" not in captured.err
    return lines[0]


# --- simulate: input files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no such file"),
        (b"kind: Pod\nmetadata: {name: caf\xe9}\n", "not UTF-8 text (invalid continuation byte at byte 30)"),
        # A YAML error part-way used to load the first document and skip the rest with exit 0.
        (CLUSTER + "---\nkind: [Node\n", "not YAML at line 8, column 1"),
        ("kind: Pod\n\tmetadata: {}\n", "not YAML at line 2, column 1: "),
        ("a: 1\nb: \x07\n", "not YAML at line 2: character #x07 is not allowed"),
    ],
)
def test_simulate_refuses_a_bad_input_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, reason: str
) -> None:
    path = tmp_path / "input.yaml"
    if content is not None:
        write(tmp_path, "input.yaml", content)
    cluster = write(tmp_path, "cluster.yaml", CLUSTER)
    code = main(["simulate", "--cluster", str(cluster), "--workload", str(path)])
    assert code == EXIT_INPUT
    line = one_line_error(capsys, "simulate")
    assert line.startswith(f"numasched simulate: {path}: {reason}")
    assert capsys.readouterr().out == ""  # no report of a half-loaded cluster


def test_simulate_refuses_a_directory_and_an_unreadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--cluster", str(tmp_path)]) == EXIT_INPUT
    assert one_line_error(capsys, "simulate") == f"numasched simulate: {tmp_path}: is a directory, not a file"
    locked = write(tmp_path, "locked.yaml", CLUSTER)
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as a user that reads any file (root)")
        assert main(["simulate", "--cluster", str(locked)]) == EXIT_INPUT
        assert "cannot read: Permission denied" in one_line_error(capsys, "simulate")
    finally:
        locked.chmod(0o600)


def test_a_later_bad_file_stops_the_run_before_any_scheduling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.yaml", CLUSTER)
    code = main(["simulate", "--cluster", str(good), "--cluster", str(tmp_path / "second.yaml")])
    assert code == EXIT_INPUT
    assert "second.yaml: no such file" in one_line_error(capsys, "simulate")


# --- simulate: configuration and results ----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read the file"),
        (b"actions: \xff\n", "not UTF-8"),
        ("actions: [allocate\n", "invalid YAML"),
        (
            'actions: "allocate"\ntiers:\n- plugins:\n  - name: binpack\n    arguments: {binpack.weight: heavy}\n',
            "line 5: tiers[0].plugins[0].arguments.binpack.weight: plugin binpack: expected an integer",
        ),
    ],
)
def test_simulate_refuses_a_bad_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, needle: str
) -> None:
    config = tmp_path / "scheduler.conf"
    if content is not None:
        write(tmp_path, "scheduler.conf", content)
    assert simulate(tmp_path, "--config", str(config)) == EXIT_CONFIG
    assert needle in one_line_error(capsys, "simulate")


def test_fail_on_unschedulable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Everything placed: 0 with or without the flag.
    assert simulate(tmp_path, "--output", "json", "--fail-on-unschedulable") == EXIT_OK
    assert json.loads(capsys.readouterr().out)["summary"]["bound"] == 1
    # A pod that fits nowhere: still 0 without the flag (the report says so), 5 with it.
    assert simulate(tmp_path, "--output", "json", workload=FITS + TOO_LARGE) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["summary"]["unschedulable"] == 1
    assert simulate(tmp_path, "--output", "json", "--fail-on-unschedulable", workload=FITS + TOO_LARGE) == EXIT_UNPLACED
    captured = capsys.readouterr()
    assert json.loads(captured.out)["summary"]["unschedulable"] == 1  # the report is still printed
    assert captured.err.strip() == "numasched simulate: 1 of 2 pods unplaced"


def test_a_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--max-cycles", "many"])
    assert caught.value.code == EXIT_USAGE


# --- run ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "no such file"), (b"\xfe\xff", "not UTF-8"), ("clusters: [\n", "not YAML at line 2")],
)
def test_run_and_exporter_refuse_a_bad_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str | None, reason: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        write(tmp_path, "kubeconfig", content)
    assert main(["run", "--kubeconfig", str(path)]) == EXIT_CONFIG
    assert one_line_error(capsys, "run").startswith(f"numasched run: kubeconfig {path}: {reason}")
    assert main(["exporter", "--node-name", "n1", "--kubeconfig", str(path), "--once"]) == EXIT_CONFIG
    assert one_line_error(capsys, "exporter").startswith(f"numasched exporter: kubeconfig {path}: {reason}")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read the file"),
        ('actions: "allocate"\ntiers:\n- plugins:\n  - name: numa-aware\n    arguments: {devices: 42}\n', "devices"),
    ],
)
def test_run_exits_with_the_config_code_before_any_api_call(
    tmp_path: Path, content: str | None, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The kubeconfig points at a port nothing listens on: reaching the API would hang or fail
    # differently; the configuration is refused first.
    kubeconfig = write(tmp_path, "kubeconfig", KUBECONFIG)
    config = tmp_path / "scheduler.conf"
    if content is not None:
        write(tmp_path, "scheduler.conf", content)
    code = main(["--log-format", "json", "run", "--kubeconfig", str(kubeconfig), "--config", str(config)])
    assert code == EXIT_CONFIG
    captured = capsys.readouterr()
    assert needle in captured.err + captured.out and "Traceback" not in captured.err


# --- exporter -------------------------------------------------------------------------------------


def test_exporter_refuses_missing_sysfs_and_a_corrupt_kubelet_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["exporter", "--node-name", "n1", "--once", "--dry-run", "--metrics-addr", ""]
    assert main([*base, "--sysfs", str(tmp_path / "nosys")]) == EXIT_INPUT
    assert one_line_error(capsys, "exporter").endswith("nosys: not a directory")
    kubelet = write(tmp_path, "config.yaml", b"kind: KubeletConfiguration\ncpuManagerPolicy: \xff\n")
    assert main([*base, "--sysfs", str(tmp_path), "--kubelet-config", str(kubelet)]) == EXIT_INPUT
    assert "--kubelet-config" in one_line_error(capsys, "exporter")
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["exporter", "--once"]) == EXIT_USAGE
    assert "--node-name" in one_line_error(capsys, "exporter")


def test_exporter_without_a_cluster_is_a_config_error_without_traceback(tmp_path: Path) -> None:
    # The reported case: this used to end in a kubernetes_asyncio ConfigException traceback.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("KUBERNETES_")}
    environment.pop("NODE_NAME", None)
    not_a_kubeconfig = write(tmp_path, "kubeconfig", "apiVersion: v1\nkind: Config\n")
    for extra in (["--kubeconfig", str(not_a_kubeconfig)], []):
        command = [sys.executable, "-m", "numasched", "exporter", "--node-name", "n1", "--once", "--metrics-addr", ""]
        inputs = ["--sysfs", str(tmp_path), "--kubelet-config", str(tmp_path / "absent.yaml")]
        result = subprocess.run(
            [*command, *inputs, *extra],
            capture_output=True,
            text=True,
            env=environment,
            timeout=60,
            check=False,
        )
        assert result.returncode == EXIT_CONFIG, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("numasched exporter: ")


def test_a_kubeconfig_list_is_read_as_the_client_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # KUBECONFIG=a:b: missing files are skipped, as kubectl and the client skip them; a bad one is not.
    good = write(tmp_path, "good", KUBECONFIG)
    bad = write(tmp_path, "bad", b"\xff")
    absent = tmp_path / "absent"
    args = ["exporter", "--node-name", "n1", "--once", "--sysfs", str(tmp_path / "nosys"), "--kubeconfig"]
    # Past the kubeconfig check, the exporter stops at the missing sysfs: the list was accepted.
    assert main([*args, f"{absent}{os.pathsep}{good}"]) == EXIT_INPUT
    assert "nosys" in one_line_error(capsys, "exporter")
    assert main([*args, f"{good}{os.pathsep}{bad}"]) == EXIT_CONFIG
    assert f"kubeconfig {bad}: not UTF-8" in one_line_error(capsys, "exporter")
    assert main([*args, f"{absent}{os.pathsep}{absent}"]) == EXIT_CONFIG
    assert "no such file" in one_line_error(capsys, "exporter")


def test_run_without_usable_credentials_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_kubeconfig = write(tmp_path, "kubeconfig", "apiVersion: v1\nkind: Config\n")
    assert main(["--log-format", "json", "run", "--kubeconfig", str(not_a_kubeconfig)]) == EXIT_CONFIG
    assert "Traceback" not in capsys.readouterr().err
    # Outside a pod and without a kubeconfig: no in-cluster credentials.
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert main(["--log-format", "json", "run"]) == EXIT_CONFIG
    assert "Traceback" not in capsys.readouterr().err


def test_exporter_metrics_address_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["exporter", "--node-name", "n1", "--metrics-addr", "localhost:http"])
    assert caught.value.code == EXIT_USAGE
    assert "metrics address must be HOST:PORT" in capsys.readouterr().err
    # A taken port is a failure at run time, in one line.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code = main(["exporter", "--node-name", "n1", "--dry-run", "--sysfs", str(tmp_path), "--metrics-addr", address])
    assert code == EXIT_FAILURE
    assert "cannot serve metrics on 127.0.0.1:" in one_line_error(capsys, "exporter")
