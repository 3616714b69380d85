"""ACL bindings in the metadata log: CreateAcls and DeleteAcls decided, DescribeAcls answered.

Theory of operation. An ACL binding (resource type, name, pattern type, principal, host,
operation, permission) is one AccessControlEntryRecord with a random id; removing it is a
RemoveAccessControlEntryRecord of that id. The image's delta folds both into
`MetadataImage.acls.by_id`, which every broker's and controller's authorizer reads
(`pykraft.broker.authorizer`), and standby controllers replay the same records.

`create_acls` is Kafka's AclControlManager.createAcls: each creation is validated on its
own (a failure answers INVALID_REQUEST for it alone, in Kafka's words), a binding that exists
already, or comes twice in the request, is answered success without a second record, and
each new one gets an id drawn from the shell's `rng` (never zero, never in use). A request
that would write more than `RECORDS_PER_REQUEST_MAX` records fails whole (every creation
UNKNOWN_SERVER_ERROR, nothing written), as Kafka's bounded record list makes it fail.

`delete_acls` is AclControlManager.deleteAcls: each filter is checked (an UNKNOWN part
answers INVALID_REQUEST), then every existing binding it matches is removed and listed in
its answer; a binding two filters match is listed by both and removed once. One request
removes at most `RECORDS_PER_REQUEST_MAX` bindings: beyond
that its filter fails whole, so no batch grows without bound.

`describe_acls` answers a DescribeAcls filter from an image.

Filters (`AclBindingFilter`) match as Kafka's ResourcePatternFilter and
AccessControlEntryFilter: ANY matches every value and None every name, principal or host;
pattern type MATCH on a name matches the LITERAL binding of that name, the LITERAL wildcard
`*` and every PREFIXED binding the name starts with, while LITERAL, PREFIXED and ANY with a
name match that exact name only.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pykraft.errors import ErrorCode, InvariantViolation
from pykraft.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from pykraft.metadata.registrations import StandardAcl

__all__ = [
    "CLUSTER_NAME",
    "RECORDS_PER_REQUEST_MAX",
    "OPERATIONS",
    "PATTERN_TYPES",
    "PERMISSION_TYPES",
    "RESOURCE_TYPES",
    "WILDCARD",
    "AclBindingFilter",
    "AclCreationResult",
    "AclDeletionResult",
    "AclRecord",
    "create_acls",
    "delete_acls",
    "describe_acls",
    "name_of",
    "validate_new_acl",
]

WILDCARD: Final = "*"
RECORDS_PER_REQUEST_MAX: Final = 10_000  # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP
_ZERO_UUID: Final = uuid.UUID(int=0)
CLUSTER_NAME: Final = "kafka-cluster"

# Kafka's ACL codes (org.apache.kafka.common.resource / .acl), the same as
# pykraft.protocol.acls, which a core may not import; a unit test keeps the two equal
RESOURCE_TYPES: Final = ("UNKNOWN", "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID",
                         "DELEGATION_TOKEN", "USER")
PATTERN_TYPES: Final = ("UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED")
OPERATIONS: Final = ("UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER",
                     "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                     "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS")
PERMISSION_TYPES: Final = ("UNKNOWN", "ANY", "DENY", "ALLOW")
_UNKNOWN, _ANY, _MATCH, _LITERAL, _PREFIXED = 0, 1, 2, 3, 4  # UNKNOWN and ANY: every table
_CLUSTER = 4
_DENY, _ALLOW = 2, 3

AclRecord = AccessControlEntryRecord | RemoveAccessControlEntryRecord


def name_of(names: tuple[str, ...], code: int) -> str:
    """Kafka's name of a code in one of the tables; a code Kafka does not know reads as
    UNKNOWN (fromCode)."""
    return names[code] if 0 <= code < len(names) else "UNKNOWN"


def _known(names: tuple[str, ...], code: int) -> int:
    return code if 0 <= code < len(names) else _UNKNOWN


@dataclass(frozen=True, slots=True)
class AclCreationResult:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeletionResult:
    error_code: ErrorCode
    error_message: str | None
    matching: tuple[StandardAcl, ...]  # the bindings removed (listed even if another
    # filter of the request removed them too)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def unknown(self) -> str | None:
        """Kafka's refusal of a filter with an UNKNOWN part (validateFilter), or None."""
        if (_known(RESOURCE_TYPES, self.resource_type) == _UNKNOWN
                or _known(PATTERN_TYPES, self.pattern_type) == _UNKNOWN):
            return "Unknown patternFilter."
        if (_known(OPERATIONS, self.operation) == _UNKNOWN
                or _known(PERMISSION_TYPES, self.permission_type) == _UNKNOWN):
            return "Unknown entryFilter."
        return None

    def matches(self, acl: StandardAcl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        if self.resource_type != _ANY and self.resource_type != acl.resource_type:
            return False
        pattern_type = self.pattern_type
        if pattern_type not in (_ANY, _MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern_type in (_ANY, acl.pattern_type):
            return name == acl.resource_name
        if acl.pattern_type == _LITERAL:  # MATCH from here on
            return name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == _PREFIXED:
            return name.startswith(acl.resource_name)
        return False

    def _matches_entry(self, acl: StandardAcl) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (_ANY, acl.operation)
                and self.permission_type in (_ANY, acl.permission_type))


def validate_new_acl(binding: StandardAcl) -> str | None:
    """Why Kafka refuses to create `binding` (INVALID_REQUEST), or None: the broker's checks
    (AclApis: the cluster's one name, no empty name) and the controller's (validateNewAcl)."""
    resource_type = _known(RESOURCE_TYPES, binding.resource_type)
    if resource_type in (_UNKNOWN, _ANY):
        return f"Invalid resourceType {name_of(RESOURCE_TYPES, binding.resource_type)}"
    if _known(PATTERN_TYPES, binding.pattern_type) not in (_LITERAL, _PREFIXED):
        return f"Invalid patternType {name_of(PATTERN_TYPES, binding.pattern_type)}"
    if _known(OPERATIONS, binding.operation) in (_UNKNOWN, _ANY):
        return f"Invalid operation {name_of(OPERATIONS, binding.operation)}"
    if _known(PERMISSION_TYPES, binding.permission_type) not in (_ALLOW, _DENY):
        return f"Invalid permissionType {name_of(PERMISSION_TYPES, binding.permission_type)}"
    if not binding.resource_name:
        return "Resource name should not be empty"
    if resource_type == _CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in binding.principal:
        return (f"Could not parse principal from `{binding.principal}` (no colon is present "
                f"separating the principal type from the principal name)")
    return None


def _new_id(rng: random.Random, in_use: Mapping[uuid.UUID, object],
            taken: set[uuid.UUID]) -> uuid.UUID:
    for _ in range(1000):
        candidate = uuid.UUID(int=rng.getrandbits(128), version=4)
        if candidate != _ZERO_UUID and candidate not in in_use and candidate not in taken:
            return candidate
    raise InvariantViolation("1000 random ACL ids in a row were taken: a broken rng")


def create_acls(
    existing: Mapping[uuid.UUID, StandardAcl], creations: Sequence[StandardAcl],
    rng: random.Random,
) -> tuple[list[AccessControlEntryRecord], list[AclCreationResult]]:
    """CreateAcls: the records to append (atomically) and one result per creation."""
    present = set(existing.values())
    records: list[AccessControlEntryRecord] = []
    results: list[AclCreationResult] = []
    taken: set[uuid.UUID] = set()  # the ids this request draws
    for binding in creations:
        refusal = validate_new_acl(binding)
        if refusal is not None:
            results.append(AclCreationResult(ErrorCode.invalid_request, refusal))
            continue
        if binding not in present:  # an existing binding is created again as a no-op
            present.add(binding)
            acl_id = _new_id(rng, existing, taken)
            taken.add(acl_id)
            records.append(AccessControlEntryRecord(
                id=acl_id, resource_type=binding.resource_type,
                resource_name=binding.resource_name, pattern_type=binding.pattern_type,
                principal=binding.principal, host=binding.host, operation=binding.operation,
                permission_type=binding.permission_type))
        results.append(AclCreationResult())
    if len(records) > RECORDS_PER_REQUEST_MAX:
        message = (f"Cannot create more than {RECORDS_PER_REQUEST_MAX} ACLs in a single "
                   f"request.")
        return [], [AclCreationResult(ErrorCode.unknown_server_error, message)
                    for _ in creations]
    return records, results


def delete_acls(
    existing: Mapping[uuid.UUID, StandardAcl], filters: Sequence[AclBindingFilter],
) -> tuple[list[RemoveAccessControlEntryRecord], list[AclDeletionResult]]:
    """DeleteAcls: the records to append (atomically) and one result per filter."""
    removed: dict[uuid.UUID, None] = {}  # ordered: the records in the order found
    results: list[AclDeletionResult] = []
    for acl_filter in filters:
        refusal = acl_filter.unknown()
        if refusal is not None:
            results.append(AclDeletionResult(ErrorCode.invalid_request, refusal, ()))
            continue
        matched = [(acl_id, acl) for acl_id, acl in existing.items() if acl_filter.matches(acl)]
        fresh = [acl_id for acl_id, _ in matched if acl_id not in removed]
        if len(removed) + len(fresh) > RECORDS_PER_REQUEST_MAX:
            results.append(AclDeletionResult(
                ErrorCode.unknown_server_error,
                f"Cannot remove more than {RECORDS_PER_REQUEST_MAX} ACLs in a single delete "
                f"operation.", ()))
            continue
        removed.update(dict.fromkeys(fresh))
        results.append(AclDeletionResult(ErrorCode.none, None,
                                         tuple(acl for _, acl in matched)))
    return [RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed], results


def describe_acls(existing: Mapping[uuid.UUID, StandardAcl],
                  acl_filter: AclBindingFilter) -> list[StandardAcl]:
    """The bindings `acl_filter` matches, each once, in a stable order (by resource, then
    entry), as DescribeAcls lists them grouped by resource."""
    found = {acl for acl in existing.values() if acl_filter.matches(acl)}
    return sorted(found, key=lambda acl: (acl.resource_type, acl.resource_name,
                                          acl.pattern_type, acl.principal, acl.host,
                                          acl.operation, acl.permission_type))
