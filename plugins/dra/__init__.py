"""Dynamic Resource Allocation: CEL device selectors and the topology-scoring claim allocator."""
