"""The numa-aware plugin: kubelet-exact topology admission, scoring and CPU/device choice."""
