"""The configuration numasched runs with when none is given: Volcano's usual actions and tiers,
with numa-aware placing tasks on the NUMA nodes the kubelet will admit them to."""

from __future__ import annotations

from numasched.conf.loader import load_config_text
from numasched.conf.model import SchedulerConfig

DEFAULT_SOURCE_NAME = "default configuration"

DEFAULT_CONFIG_TEXT = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
  - name: binpack
  - name: dra
  - name: numa-aware
    arguments:
      weight: 10
"""


def default_config() -> SchedulerConfig:
    """The parsed DEFAULT_CONFIG_TEXT (a fresh object each call: arguments are plain dicts)."""
    return load_config_text(DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE_NAME)
