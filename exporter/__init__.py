"""The node agent: discovers a node's topology and publishes it."""
