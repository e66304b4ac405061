"""The bundled example cluster, workload and configuration used by `numasched simulate`."""
