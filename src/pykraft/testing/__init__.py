"""Test helpers: LocalCluster and pytest fixtures (see `pykraft.testing.fixtures`)."""

from pykraft.testing.local_cluster import LocalCluster, free_port

__all__ = ["LocalCluster", "free_port"]
