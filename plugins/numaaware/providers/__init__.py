"""Topology hint providers (CPU, devices) and the provider protocol."""
