"""Generated protobuf and gRPC modules for the kubelet podresources/v1 API (see api.proto)."""
