"""meta.properties: Java-properties round trips and validation against the configuration."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import InconsistentClusterId
from pykraft.storage.checkpoint import kafka_uuid_string
from pykraft.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    format_java_properties,
    generate_directory_id,
    parse_java_properties,
    read_meta_properties,
    verify_ensemble,
    write_meta_properties,
)

DIRECTORY_ID = uuid.UUID("6c0a8f1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b")


def test_round_trip_and_kafka_layout(tmp_path: Path) -> None:
    """The file has Kafka's keys; reading it back gives the same MetaProperties."""
    meta = MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qk", 3, DIRECTORY_ID)
    write_meta_properties(tmp_path, meta)
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1\n" in text and "node.id=3\n" in text
    assert "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n" in text
    assert f"directory.id={kafka_uuid_string(DIRECTORY_ID)}\n" in text
    assert read_meta_properties(tmp_path) == meta
    assert read_meta_properties(tmp_path / "absent") is None


def test_reads_a_file_as_java_writes_it(tmp_path: Path) -> None:
    """Comments, ':' and space separators, escapes and continuation lines are understood."""
    (tmp_path / "meta.properties").write_text(
        "#\n#Thu Jan 01 00:00:00 UTC 2025\n! another comment\n"
        "node.id : 5\nversion=1\ncluster.id=abc\\\n    def\n"
        "directory.id AAAAAAAAAAAAAAAAAAAAAA\nextra\\ key=a\\tb\\u00e9\n",
        encoding="latin-1",
    )
    with pytest.raises(MetaPropertiesError, match="reserved"):
        read_meta_properties(tmp_path).verify("x")  # type: ignore[union-attr]
    meta = read_meta_properties(tmp_path)
    assert meta is not None
    assert (meta.version, meta.node_id, meta.cluster_id) == (1, 5, "abcdef")
    assert dict(meta.other) == {"extra key": "a\tb\u00e9"}


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=6))
def test_java_properties_round_trip(properties: dict[str, str]) -> None:
    """Whatever keys and values we write, we read back unchanged."""
    assert parse_java_properties(format_java_properties(properties)) == properties


def test_verification_errors_are_specific() -> None:
    """Cluster mismatch is InconsistentClusterId; node mismatch and v0 are MetaPropertiesError."""
    meta = MetaProperties(1, "cluster-a", 1, DIRECTORY_ID)
    meta.verify("d", expected_cluster_id="cluster-a", expected_node_id=1)
    with pytest.raises(InconsistentClusterId, match="Expected cluster-b, but read cluster-a"):
        meta.verify("d", expected_cluster_id="cluster-b")
    with pytest.raises(MetaPropertiesError, match="node id 1 doesn't match"):
        meta.verify("d", expected_node_id=2)
    with pytest.raises(MetaPropertiesError, match="ZooKeeper"):
        MetaProperties(0, "cluster-a", 1).verify("d")
    with pytest.raises(MetaPropertiesError, match="node.id"):
        MetaProperties.from_properties({"version": "1", "cluster.id": "c"}, "d")
    with pytest.raises(MetaPropertiesError, match="version"):
        MetaProperties.from_properties({"version": "7", "cluster.id": "c", "node.id": "1"}, "d")
    with pytest.raises(MetaPropertiesError, match="not an integer"):
        MetaProperties.from_properties({"version": "1", "cluster.id": "c", "node.id": "x"}, "d")


def test_ensemble_must_agree_and_have_distinct_directory_ids(tmp_path: Path) -> None:
    """All dirs share cluster and node; a copied directory id is caught."""
    rng = random.Random(3)
    a = MetaProperties(1, "c", 1, generate_directory_id(rng))
    b = MetaProperties(1, "c", 1, generate_directory_id(rng))
    verify_ensemble({tmp_path / "a": a, tmp_path / "b": b}, expected_node_id=1)
    with pytest.raises(MetaPropertiesError, match="duplicate directory.id"):
        verify_ensemble({tmp_path / "a": a, tmp_path / "b": a})
    with pytest.raises(InconsistentClusterId):
        verify_ensemble({tmp_path / "a": a, tmp_path / "b": MetaProperties(1, "d", 1)})
    with pytest.raises(MetaPropertiesError, match="node id"):
        verify_ensemble({tmp_path / "a": a, tmp_path / "b": MetaProperties(1, "c", 2)})
