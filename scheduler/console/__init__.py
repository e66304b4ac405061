"""The NUMA console: a web view of the scheduler's cache (every node's NUMA occupancy, the decision
of each pod, why pending pods wait), the numa-aware policy API and the NUMA gauges.

Nothing here changes the cache: every page is drawn from a snapshot (docs/console.md).
"""
