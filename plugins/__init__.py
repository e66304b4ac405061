"""Built-in scheduler plugins."""
