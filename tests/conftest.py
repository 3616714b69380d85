from pykraft.testing.fixtures import pykraft_cluster, pykraft_node  # noqa: F401
