"""trainop: a Kubernetes operator for topology-aware, multi-tenant distributed GPU training."""

__version__ = "0.1.0"
