"""The Kubernetes side of the cache: informers, the binder and the status writer on kubernetes_asyncio."""
