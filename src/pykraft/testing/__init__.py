"""Test helpers: LocalCluster and pytest fixtures (see `pykraft.testing.fixtures`)."""

from pykraft.testing.local_cluster import LocalCluster
from pykraft.testing.ports import free_port

__all__ = ["LocalCluster", "free_port"]
