"""Authorization: may this request's principal do this operation on this resource?

`Authorizer` is what the request handlers ask; `AllowAll` answers yes to everything and is
what a node uses when `authorizer.class.name` is empty (Kafka's default: no authorizer).
`StandardAuthorizer` is Kafka's (org.apache.kafka.metadata.authorizer.StandardAuthorizer):
it decides from the ACL bindings of this node's metadata image, so every broker and
controller authorizes on its own, without asking anyone.

Theory of operation (Kafka's StandardAuthorizerData). A check is (principal, host,
operation, resource type, resource name). In order:

1. a principal named in `super.users` may do anything;
2. the ACLs that *apply to the resource* are those of its type whose pattern is the LITERAL
   name itself, the LITERAL wildcard `*`, or a PREFIXED name the resource's name starts with;
3. of those, an ACL *matches* when its principal is the request's or `User:*`, its host is
   the client's address or `*`, and its operation is the one asked, or ALL, or -- for an
   ALLOW ACL only -- one that implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE;
   ALTER_CONFIGS implies DESCRIBE_CONFIGS). A DENY READ does not deny DESCRIBE;
4. a matching DENY wins; else a matching ALLOW allows; else, when no ACL applies to the
   resource at all, `allow.everyone.if.no.acl.found` decides (default: deny); else deny.

The index. A check must cost the same with 10 bindings as with 10,000, so nothing scans the
bindings: LITERAL and PREFIXED bindings sit in two dicts keyed by (resource type, name), each
holding a dict from principal to the bindings of that pattern. A check looks up the exact
name, `*`, and the name's prefixes -- only at the prefix lengths some PREFIXED binding of the
type has (a count per length), so a 200-character name with two prefixed lengths costs two
lookups, not 200. The patterns found for a (resource type, name) are remembered until the
bindings next change (at most _APPLYING_MAX names), so a client's repeated requests pay the
lookups once. Under each pattern only the request's principal and `User:*` are read.
`authorize_by_resource_type` reads a third index, bindings by (resource type, principal).

Updates are incremental: `publish(delta, image)` (a metadata publisher) adds and removes the
bindings `delta.changed_acls` names. An image whose bindings did not come from the ones
this authorizer last saw (a snapshot load rebuilds through a delta too, but a controller-only
node's cache adopts images with an empty delta) is taken in whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType

if TYPE_CHECKING:
    from pykraft.metadata.image import MetadataDelta, MetadataImage
    from pykraft.metadata.registrations import StandardAcl

__all__ = [
    "ALLOW_ALL",
    "STANDARD_AUTHORIZER_CLASS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AllowAll",
    "Authorizer",
    "AuthorizerSettings",
    "StandardAuthorizer",
]

STANDARD_AUTHORIZER_CLASS: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
WILDCARD: Final = "*"  # a LITERAL resource name, or a host, that matches every one
WILDCARD_PRINCIPAL: Final = "User:*"

Op = AclOperation
_ALL: Final = int(Op.ALL)
_DESCRIBE: Final = int(Op.DESCRIBE)
_DESCRIBE_CONFIGS: Final = int(Op.DESCRIBE_CONFIGS)
_ALLOW: Final = int(AclPermissionType.ALLOW)
_DENY: Final = int(AclPermissionType.DENY)
_LITERAL: Final = int(PatternType.LITERAL)
_PREFIXED: Final = int(PatternType.PREFIXED)
# operations whose ALLOW implies DESCRIBE, and DESCRIBE_CONFIGS (only in an ALLOW ACL)
_IMPLIES_DESCRIBE: Final = frozenset(int(op) for op in (
    Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER))
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset(int(op) for op in (
    Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))


class Authorizer(Protocol):
    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether `context.principal` from `context.client_host` may do `operation` on the
        resource (for the cluster, `name` is "kafka-cluster")."""
        ...

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: whether some resource of the type allows the
        operation and no DENY covers it all (e.g. idempotent producers: WRITE on any topic)."""
        ...


class AllowAll:
    """No authorizer configured: every request is allowed."""

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return True


ALLOW_ALL: Final = AllowAll()


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """The authorizer keys of a node's configuration (server.config.authorizer_settings)."""

    class_name: str = ""  # empty: no authorizer
    super_users: frozenset[str] = frozenset()  # principals, "User:admin"
    allow_everyone_if_no_acl_found: bool = False


_PRINCIPALS_MAX: Final = 10_000  # principals whose "Type:name" a StandardAuthorizer remembers
# resources whose applying patterns a StandardAuthorizer remembers (cleared when full, and at
# every change of the bindings)
_APPLYING_MAX: Final = 100_000
# (resource type, pattern name) -> principal -> the bindings of that pattern and principal
_PatternIndex = dict[tuple[int, str], dict[str, list["StandardAcl"]]]


def _match(acl: StandardAcl, operation: int, host: str) -> int:
    """ALLOW or DENY when `acl` matches (its principal is already known to), else 0."""
    if acl.host != WILDCARD and acl.host != host:
        return 0
    acl_operation = acl.operation
    if acl_operation != _ALL and acl_operation != operation:
        if acl.permission_type != _ALLOW:
            return 0  # a DENY of READ does not deny DESCRIBE
        if operation == _DESCRIBE:
            if acl_operation not in _IMPLIES_DESCRIBE:
                return 0
        elif operation != _DESCRIBE_CONFIGS or acl_operation not in _IMPLIES_DESCRIBE_CONFIGS:
            return 0
    return acl.permission_type


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over this node's ACL bindings (see the module's doc)."""

    def __init__(self, settings: AuthorizerSettings = AuthorizerSettings()) -> None:
        self.super_users = settings.super_users
        self.allow_everyone_if_no_acl_found = settings.allow_everyone_if_no_acl_found
        self._by_id: dict[uuid.UUID, StandardAcl] = {}
        self._literal: _PatternIndex = {}
        self._prefixed: _PatternIndex = {}
        # resource type -> prefix length -> how many PREFIXED bindings have that length
        self._prefix_counts: dict[int, dict[int, int]] = {}
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}  # sorted keys of the counts
        # (resource type, principal) -> id -> binding: authorize_by_resource_type's scan
        self._by_principal: dict[tuple[int, str], dict[uuid.UUID, StandardAcl]] = {}
        self._seen: object = None  # the image's ACL map these indexes were built from
        self._principals: dict[KafkaPrincipal, str] = {}
        # (resource type, name) -> the pattern indexes' entries that apply to it, so that a
        # check probes the prefix lengths once per resource, not each time
        self._applying: dict[tuple[int, str], tuple[dict[str, list[StandardAcl]], ...]] = {}

    # -- the bindings ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_id)

    def load(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None:
        """Take `acls` (an image's `acls.by_id`) as the whole set of bindings."""
        for acl_id in list(self._by_id):
            self._remove(acl_id)
        for acl_id, acl in acls.items():
            self._add(acl_id, acl)
        self._seen = acls

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A metadata publisher: follow the image's ACL bindings, one delta at a time."""
        acls = image.acls.by_id
        if acls is self._seen:
            return  # no ACL changed (the image keeps the very same map then)
        if delta.base.acls.by_id is not self._seen:
            self.load(acls)  # an adopted image, or the first one: take it in whole
            return
        self.apply_changes(delta.changed_acls.items())
        self._seen = acls

    def apply_changes(self, changes: Iterable[tuple[uuid.UUID, StandardAcl | None]]) -> None:
        """Add (a binding) or remove (None) each id's binding."""
        for acl_id, acl in changes:
            self._remove(acl_id)
            if acl is not None:
                self._add(acl_id, acl)

    def _add(self, acl_id: uuid.UUID, acl: StandardAcl) -> None:
        self._applying.clear()  # a new pattern may apply to any name
        self._by_id[acl_id] = acl
        index = self._prefixed if acl.pattern_type == _PREFIXED else self._literal
        index.setdefault((acl.resource_type, acl.resource_name), {}).setdefault(
            acl.principal, []).append(acl)
        self._by_principal.setdefault((acl.resource_type, acl.principal), {})[acl_id] = acl
        if acl.pattern_type == _PREFIXED:
            counts = self._prefix_counts.setdefault(acl.resource_type, {})
            length = len(acl.resource_name)
            counts[length] = counts.get(length, 0) + 1
            if counts[length] == 1:
                self._prefix_lengths[acl.resource_type] = tuple(sorted(counts))

    def _remove(self, acl_id: uuid.UUID) -> None:
        acl = self._by_id.pop(acl_id, None)
        if acl is None:
            return
        self._applying.clear()  # a pattern's entry may go
        index = self._prefixed if acl.pattern_type == _PREFIXED else self._literal
        key = (acl.resource_type, acl.resource_name)
        by_principal = index[key]
        bindings = by_principal[acl.principal]
        bindings.remove(acl)  # equal bindings are interchangeable: any one of them goes
        if not bindings:
            del by_principal[acl.principal]
            if not by_principal:
                del index[key]
        owned = self._by_principal[(acl.resource_type, acl.principal)]
        del owned[acl_id]
        if not owned:
            del self._by_principal[(acl.resource_type, acl.principal)]
        if acl.pattern_type == _PREFIXED:
            counts = self._prefix_counts[acl.resource_type]
            length = len(acl.resource_name)
            counts[length] -= 1
            if not counts[length]:
                del counts[length]
                self._prefix_lengths[acl.resource_type] = tuple(sorted(counts))

    # -- checks ------------------------------------------------------------------------

    def _principal(self, principal: KafkaPrincipal) -> str:
        """`principal` as ACLs name it ("User:alice"), remembered: a check must not format
        a string each time. The memo holds the principals seen lately, at most
        `_PRINCIPALS_MAX` of them (cleared when full)."""
        text = self._principals.get(principal)
        if text is None:
            if len(self._principals) >= _PRINCIPALS_MAX:
                self._principals.clear()
            text = self._principals[principal] = str(principal)
        return text

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        principal = self._principal(context.principal)
        if principal in self.super_users:
            return True
        applying = self._applying.get((resource_type, name))
        if applying is None:
            applying = self._patterns_applying(resource_type, name)
        if not applying:
            return self.allow_everyone_if_no_acl_found
        host, allowed = context.client_host, False
        for patterns in applying:
            for who in (principal, WILDCARD_PRINCIPAL):
                bindings = patterns.get(who)
                if bindings is None:
                    continue
                for acl in bindings:
                    result = _match(acl, operation, host)
                    if result == _DENY:
                        return False
                    if result == _ALLOW:
                        allowed = True
        return allowed

    def _patterns_applying(self, resource_type: int,
                           name: str) -> tuple[dict[str, list[StandardAcl]], ...]:
        """The pattern indexes' entries that apply to the name (an IntEnum hashes as its int:
        (TOPIC, name) finds the (2, name) key): literal, the literal wildcard, then each
        prefix length; remembered until the bindings change."""
        literal = self._literal
        applying = [found for found in (literal.get((resource_type, name)),
                                        literal.get((resource_type, WILDCARD)))
                    if found is not None]
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed, size = self._prefixed, len(name)
            for length in lengths:
                if length > size:
                    break
                found = prefixed.get((resource_type, name[:length]))
                if found is not None:
                    applying.append(found)
        if len(self._applying) >= _APPLYING_MAX:
            self._applying.clear()
        result = self._applying[(resource_type, name)] = tuple(applying)
        return result

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: first the check of an arbitrary name
        (so super users, wildcard bindings and allow.everyone.if.no.acl.found answer as they
        would for any resource), then: a DENY of the LITERAL `*` refuses; an ALLOW of it
        allows; else some ALLOW'd LITERAL name not DENY'd literally, or ALLOW'd name or
        prefix with no DENY'd prefix of it, allows. Implied operations do not count here."""
        if operation in (Op.ANY, Op.UNKNOWN) or resource_type in (ResourceType.ANY,
                                                                  ResourceType.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type needs a definite operation and "
                             f"resource type, not {operation.name} and {resource_type.name}")
        if self.authorize(context, operation, resource_type, "hardcode"):
            return True
        principal, host = self._principal(context.principal), context.client_host
        denied: dict[int, set[str]] = {_LITERAL: set(), _PREFIXED: set()}
        allowed: dict[int, set[str]] = {_LITERAL: set(), _PREFIXED: set()}
        wildcard_allowed = False
        for who in (principal, WILDCARD_PRINCIPAL):
            for acl in self._by_principal.get((int(resource_type), who), {}).values():
                if acl.host != WILDCARD and acl.host != host:
                    continue
                if acl.operation != _ALL and acl.operation != operation:
                    continue
                if acl.permission_type == _DENY:
                    if acl.pattern_type == _LITERAL and acl.resource_name == WILDCARD:
                        return False
                    denied[acl.pattern_type].add(acl.resource_name)
                elif acl.pattern_type == _LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allowed = True
                else:
                    allowed[acl.pattern_type].add(acl.resource_name)
        if wildcard_allowed:
            return True
        denied_prefixes = denied[_PREFIXED]
        for pattern_type, names in allowed.items():
            for name in names:
                if pattern_type == _LITERAL and name in denied[_LITERAL]:
                    continue
                if not any(name[:end] in denied_prefixes for end in range(1, len(name) + 1)):
                    return True
        return False

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.super_users
