"""Cluster metadata: the `__cluster_metadata` record kinds, their codec, and the image.

- `records` — one frozen dataclass per record kind (generated from Kafka's schemas).
- `codec` — `encode_metadata_record` / `decode_metadata_record` (Kafka's serde framing).
- `image` — `MetadataImage` (immutable) and `MetadataDelta` (replay, apply).
- `loader` — `MetadataLoader`: committed batches in, one published image per batch out.
"""
