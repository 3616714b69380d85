"""Time decoding and encoding `__cluster_metadata` records, per record kind.

Every node decodes every PartitionRecord (topic creation, snapshot load) and every
PartitionChangeRecord (fencing a broker at 100,000 partitions is ~100,000 of them), so these
are the records that matter. Each is written as a controller at metadata.version 3.7+
writes it (record version 1: a PartitionRecord carries one directory per replica), for
1,000 topics of 200 partitions, in topic order as the log holds them.

Run: .venv/bin/python benchmarks/metadata_codec.py [--records 200000]
"""

from __future__ import annotations

import argparse
import random
import uuid
from collections.abc import Sequence

from records_codec import ROUNDS, best_of  # the sibling script (its directory is on sys.path)

from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.records import MetadataRecord, PartitionChangeRecord, PartitionRecord

RECORD_VERSION = 1  # PartitionRecord and PartitionChangeRecord at metadata.version 3.7+
PARTITIONS_PER_TOPIC = 200
BROKERS_COUNT = 6


def topic_ids(count: int, rng: random.Random) -> list[uuid.UUID]:
    """The topic id of each of `count` partitions, in topic order as the log holds them."""
    ids = [uuid.UUID(int=rng.getrandbits(128))
           for _ in range(-(-count // PARTITIONS_PER_TOPIC))]
    return [ids[index // PARTITIONS_PER_TOPIC] for index in range(count)]


def partition_records(count: int, rng: random.Random) -> list[MetadataRecord]:
    """New partitions: 3 replicas, all in the ISR, each in its broker's one log dir."""
    log_dirs = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(BROKERS_COUNT)]
    records: list[MetadataRecord] = []
    for index, topic_id in enumerate(topic_ids(count, rng)):
        partition_id = index % PARTITIONS_PER_TOPIC
        replicas = tuple(rng.sample(range(BROKERS_COUNT), 3))
        records.append(PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=replicas,
            leader=replicas[0], leader_recovery_state=0, leader_epoch=rng.randrange(5),
            partition_epoch=rng.randrange(10),
            directories=tuple(log_dirs[replica] for replica in replicas),
        ))  # fmt: skip
    return records


def change_records(count: int, rng: random.Random, *, leader: bool) -> list[MetadataRecord]:
    """A broker fenced: it leaves the ISR of each of its partitions (`leader`: and a new
    leader is elected, where it led)."""
    records: list[MetadataRecord] = []
    for index, topic_id in enumerate(topic_ids(count, rng)):
        partition_id = index % PARTITIONS_PER_TOPIC
        isr = tuple(rng.sample(range(1, BROKERS_COUNT), 2))
        records.append(PartitionChangeRecord(
            partition_id=partition_id, topic_id=topic_id, isr=isr,
            leader=isr[0] if leader else -2,
        ))  # fmt: skip
    return records


def decode_all(values: Sequence[bytes]) -> None:
    for value in values:
        decode_metadata_record(value)


def encode_all(records: Sequence[MetadataRecord]) -> None:
    for record in records:
        encode_metadata_record(record, RECORD_VERSION)


def measure(label: str, records: Sequence[MetadataRecord]) -> None:
    values = [encode_metadata_record(record, RECORD_VERSION) for record in records]
    assert [decode_metadata_record(value) for value in values] == list(records)
    decode_seconds = best_of(lambda: decode_all(values))
    encode_seconds = best_of(lambda: encode_all(records))
    per_record = 1e6 / len(records)
    print(
        f"{label:<38} {len(values[0]):>3} B  decode {decode_seconds * per_record:5.2f} µs"
        f"  encode {encode_seconds * per_record:5.2f} µs  (best of {ROUNDS})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    count = parser.parse_args().records
    rng = random.Random(42)
    measure("PartitionRecord v1", partition_records(count, rng))
    measure("PartitionChangeRecord v1 (ISR)", change_records(count, rng, leader=False))
    measure("PartitionChangeRecord v1 (leader+ISR)", change_records(count, rng, leader=True))


if __name__ == "__main__":
    main()
