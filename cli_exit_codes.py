"""The exit status of every `numasched` command, one meaning per number (README.md, docs/simulate.md).

Scripts tell "the scheduler could not place everything" from "the input was wrong" from "the
command line was wrong" by these numbers, so they never change meaning.
"""

from __future__ import annotations

# Finished as asked: simulate ran, the exporter published (--once), the scheduler stopped on a signal.
EXIT_OK = 0
# A failure at run time with good inputs: the exporter could not publish (--once) or serve its
# metrics (a port taken), a shutdown that outlived its grace period.
EXIT_FAILURE = 1
# The command line itself: an unknown option, a malformed value (argparse exits with 2 too).
EXIT_USAGE = 2
# A configuration that cannot be used: the scheduler configuration (file, ConfigMap, a plugin
# argument of the wrong type), the kubeconfig or in-cluster credentials.
EXIT_CONFIG = 3
# An input file that is missing, unreadable, not UTF-8 or not YAML: simulate's --cluster and
# --workload files, the exporter's --kubelet-config, a --sysfs root that is not a directory.
EXIT_INPUT = 4
# simulate --fail-on-unschedulable: some pods of ours stayed unplaced (unschedulable or pending).
EXIT_UNPLACED = 5
