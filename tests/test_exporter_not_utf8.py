"""Files the exporter reads that are not UTF-8 are reported and read as absent, never a traceback."""

from __future__ import annotations

from pathlib import Path

from numasched.exporter.kubelet_config import KubeletConfig, read_kubelet_config
from numasched.exporter.usage import NO_USAGE, read_cpu_manager_state

NOT_UTF8 = b"\xff\xfe\x00garbage\x80"


def test_a_kubelet_config_that_is_not_utf8_gives_the_kubelet_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(NOT_UTF8)
    assert read_kubelet_config(path) == KubeletConfig()


def test_a_cpu_manager_checkpoint_that_is_not_utf8_means_no_usage_known(tmp_path: Path) -> None:
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(NOT_UTF8)
    assert read_cpu_manager_state(path) == NO_USAGE
