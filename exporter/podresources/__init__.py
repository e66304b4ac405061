"""The kubelet PodResources API: generated gRPC modules (v1/) and the exporter's client."""
