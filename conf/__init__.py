"""Scheduler configuration in Volcano's volcano-scheduler.conf format."""
