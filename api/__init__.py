"""Pure data model of the scheduler: no I/O, no clocks, no cluster access."""
