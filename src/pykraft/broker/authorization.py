"""What every request handler asks of the `Authorizer`, in Kafka's AuthHelper shapes.

A handler holds an `authorizer` (ALLOW_ALL until the node sets the one its
`authorizer.class.name` names) and asks it with Kafka's resource and operation for its API
(KafkaApis, ControllerApis). These helpers keep the questions cheap and alike: the allow-all
authorizer is recognised and never asked per name (the produce and fetch paths pay nothing
without ACLs), a name asked about twice in one request is asked once, and KIP-430's
authorized-operations bit fields are computed for the request's own principal.

`refusal` builds the answer Kafka's `AbstractRequest.getErrorResponse` gives a request refused
as a whole (CLUSTER_AUTHORIZATION_FAILED on a controller's RPCs, say): the response type of the
request's version with its top-level error code set and every other field empty.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Iterable
from functools import cache
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.authorizer import ALLOW_ALL, AllowAll, Authorizer
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.api import AUTHORIZED_OPERATIONS_OMITTED, operations_bit_field
from pykraft.protocol.framing import response_type

__all__ = [
    "CLUSTER_SUPPORTED",
    "GROUP_SUPPORTED",
    "TOPIC_SUPPORTED",
    "TRANSACTIONAL_ID_SUPPORTED",
    "Authorized",
    "allowed_names",
    "allows",
    "allows_cluster",
    "authorized_operations",
    "is_allow_all",
    "refusal",
]

Op = AclOperation
# Kafka's AclEntry.supportedOperations per resource type: what KIP-430 reports on
TOPIC_SUPPORTED: Final = (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                          Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
GROUP_SUPPORTED: Final = (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS,
                          Op.ALTER_CONFIGS)
CLUSTER_SUPPORTED: Final = (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                            Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE)
TRANSACTIONAL_ID_SUPPORTED: Final = (Op.DESCRIBE, Op.WRITE)


def is_allow_all(authorizer: Authorizer) -> bool:
    return authorizer is ALLOW_ALL or isinstance(authorizer, AllowAll)


def allows(authorizer: Authorizer, context: RequestContext, operation: AclOperation,
           resource_type: ResourceType, name: str) -> bool:
    return is_allow_all(authorizer) or authorizer.authorize(context, operation,
                                                            resource_type, name)


def allows_cluster(authorizer: Authorizer, context: RequestContext,
                   operation: AclOperation) -> bool:
    return allows(authorizer, context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_names(authorizer: Authorizer, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, names: Iterable[str | None]) -> set[str]:
    """The distinct names among `names` the principal may do `operation` on (None, a name a
    client left out, is never allowed); each asked once (Kafka's filterByAuthorized)."""
    distinct = {name for name in names if name is not None}
    if is_allow_all(authorizer):
        return distinct
    return {name for name in distinct
            if authorizer.authorize(context, operation, resource_type, name)}


def authorized_operations(authorizer: Authorizer, context: RequestContext,
                          resource_type: ResourceType, name: str,
                          supported: Iterable[AclOperation]) -> int:
    """KIP-430: the bit field of the operations the principal may do on the resource."""
    return operations_bit_field(frozenset(
        int(operation) for operation in supported
        if allows(authorizer, context, operation, resource_type, name)))


def operations_if(asked: bool, authorizer: Authorizer, context: RequestContext,
                  resource_type: ResourceType, name: str,
                  supported: Iterable[AclOperation]) -> int:
    """The KIP-430 field of one resource: computed when the request asked, else the sentinel."""
    if not asked:
        return AUTHORIZED_OPERATIONS_OMITTED
    return authorized_operations(authorizer, context, resource_type, name, supported)


class Authorized:
    """A handler group's authorizer: ALLOW_ALL until the node sets its own."""

    authorizer: Authorizer = ALLOW_ALL


def refusal(api_key: int, version: int, error: ErrorCode) -> Any:
    """The response to a request refused as a whole: `error` at the top, the rest empty."""
    return _empty(response_type(api_key, version), error)


def _empty(entity_type: type, error: ErrorCode) -> Any:
    values = {name: _zero(hint, error) for name, hint in _required_fields(entity_type)}
    return entity_type(**values)


@cache
def _required_fields(entity_type: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(entity_type)
    return tuple((each.name, hints[each.name]) for each in dataclasses.fields(entity_type)
                 if each.init and each.default is dataclasses.MISSING
                 and each.default_factory is dataclasses.MISSING)


def _zero(hint: Any, error: ErrorCode) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin is tuple:
        return ()
    if hint is ErrorCode:
        return error
    if dataclasses.is_dataclass(hint):
        return _empty(typing.cast(type, hint), error)
    if isinstance(hint, type):
        if issubclass(hint, bool):
            return False
        if issubclass(hint, datetime.timedelta):
            return typing.cast(Any, hint)(datetime.timedelta(0))
        if issubclass(hint, datetime.datetime):
            return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
        if issubclass(hint, int):
            return hint(-1)  # ids, epochs and offsets: -1 is "none" in Kafka's answers
        if issubclass(hint, float):
            return 0.0
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if issubclass(hint, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"no empty value for a field of type {hint!r}")
