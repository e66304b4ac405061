"""The cluster view: informers, converters, the ledger of assumed allocations, snapshot, binder."""
