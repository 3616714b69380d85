"""Which APIs a node serves, at which versions.

The ranges are what this node implements, not all kio knows: a version is listed only when
every field it adds is honoured (or is a documented deviation in docs/protocol.md).
Versions below Kafka 4.0's baseline (KIP-896) are not offered; kio does not define them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# api key -> (min version, max version). Each group of APIs is served by one handler group
# (broker.apis for the data path, broker.admin_apis for metadata); a feature that adds APIs
# brings its own table with its handlers (see broker.apis.ApiGroup).
DATA_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 12),  # v13 addresses topics by id (Kafka 4.1); not yet
    ApiKey.FETCH: (4, 17),  # v17: a follower's directory id (KIP-853), used by KRaft only
    ApiKey.LIST_OFFSETS: (1, 10),  # v10: a timeout for tiered reads (KIP-1075); none here
    ApiKey.METADATA: (0, 13),  # v13: a top-level error code (KIP-1102)
    ApiKey.API_VERSIONS: (0, 4),
    # answered by the connection itself (net/sasl.py), on every listener as Kafka 4.0 does
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}

ADMIN_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),  # v2: fenced brokers on request (KIP-1073)
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),
    ApiKey.UNREGISTER_BROKER: (0, 0),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),  # KIP-546; stored, not enforced (docs/deviations.md)
}

# the admin APIs of a broker listener: Kafka 4.0's controllers do not serve
# DescribeClientQuotas (its listeners are ["broker"])
BROKER_ADMIN_APIS: Final[dict[int, tuple[int, int]]] = {
    **ADMIN_APIS,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
}

# SCRAM credentials (KIP-554), served by broker.credential_apis on broker and controller
# listeners alike, as Kafka 4.0 lists them
CREDENTIAL_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

# ACLs in the metadata log, served by broker.acl_apis on broker and controller listeners
# alike (Kafka 4.0's listeners are ["broker", "controller"]; v0 went with KIP-896)
ACL_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
}

# what a broker listener serves before any feature adds its own APIs
BROKER_APIS: Final[dict[int, tuple[int, int]]] = {**DATA_APIS, **BROKER_ADMIN_APIS}

# served on controller listeners: ApiVersions and the metadata APIs, at the same versions
# as on broker listeners (more come with the multi-node controller)
CONTROLLER_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.API_VERSIONS: DATA_APIS[ApiKey.API_VERSIONS],
    ApiKey.SASL_HANDSHAKE: DATA_APIS[ApiKey.SASL_HANDSHAKE],
    ApiKey.SASL_AUTHENTICATE: DATA_APIS[ApiKey.SASL_AUTHENTICATE],
    **ADMIN_APIS,
}


def api_name(api_key: int) -> str:
    """The API's name for messages ("FETCH"), or "api key N" for a key not listed here."""
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


def supports(table: dict[int, tuple[int, int]], api_key: int, api_version: int) -> bool:
    versions = table.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


# KIP-430 authorized operations: a bit field of Kafka's AclOperation codes. With no authorizer
# configured Kafka allows each resource type every operation it supports
# (AclEntry.supportedOperations); a response whose request did not ask carries the sentinel.
AUTHORIZED_OPERATIONS_OMITTED: Final = -2147483648
_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE = 3, 4, 5, 6, 7, 8
_CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = 9, 10, 11, 12


def operations_bit_field(codes: frozenset[int]) -> int:
    return sum(1 << code for code in codes)


TOPIC_OPERATIONS: Final = operations_bit_field(frozenset({
    _READ, _WRITE, _CREATE, _DESCRIBE, _DELETE, _ALTER, _DESCRIBE_CONFIGS, _ALTER_CONFIGS}))
CLUSTER_OPERATIONS: Final = operations_bit_field(frozenset({
    _CREATE, _CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE, _ALTER,
    _DESCRIBE}))
