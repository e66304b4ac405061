"""The scheduling framework: session, statement, plugin and action protocols, statuses, cycle
state and the registry. It knows no plugin and no action by name; the runtime (numasched.scheduler)
registers the built-in ones (numasched.scheduler.builtin) and runs sessions."""
