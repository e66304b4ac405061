"""The scheduling framework: loop, session, statement, registry, actions."""
