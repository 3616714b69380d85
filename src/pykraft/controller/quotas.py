"""Client quotas (KIP-546): AlterClientQuotas decided, DescribeClientQuotas matched.

Theory of operation. A quota entity is a set of (entity type, name) pairs, the type one of
`user`, `client-id` and `ip`, the name None for the type's default entity. Its quotas are
(key, double) pairs, each stored as one ClientQuotaRecord in the metadata log (`remove`
deletes the key) and folded into `MetadataImage.client_quotas` by the image's delta, which
brokers and standby controllers replay alike.

`alter_client_quotas` is Kafka's ClientQuotaControlManager: each entity of the request is
decided on its own and either changes as asked or not at all. The checks, in Kafka's order
and with its messages: no key twice for one entity, no entity twice in a request, a known
non-empty type at most once per entity, no empty name, `ip` alone (a valid address) or
`user`/`client-id` (alone or together); then each key must be one that entity takes, its
value above 0 and whole where the key is an integer. A record is written only for a value
that changes (or a key that is removed and was set).

`describe_client_quotas` is Kafka's ClientQuotasImage.describe: filter components of type
EXACT (name, or None for the default), DEFAULT, or SPECIFIED (any name); an entity matches
when it has every filtered type with the wanted name, and with `strict` no other type.

Quotas are stored and described but not enforced (no throttling): docs/deviations.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import immutables

from pykraft.errors import ErrorCode
from pykraft.metadata.records import ClientQuotaRecord
from pykraft.metadata.registrations import quota_entity

__all__ = [
    "CLIENT_ID",
    "IP",
    "USER",
    "QUOTA_KEYS",
    "ClientQuotaAlteration",
    "ClientQuotaResult",
    "DescribeQuotasError",
    "FilterComponent",
    "alter_client_quotas",
    "describe_client_quotas",
    "entity_text",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = frozenset({USER, CLIENT_ID, IP})

# QuotaConfig.userAndClientQuotaConfigs / ipConfigs: key -> Kafka's type
_USER_CLIENT_KEYS: Final = {"producer_byte_rate": "long", "consumer_byte_rate": "long",
                            "request_percentage": "double", "controller_mutation_rate": "double"}
_IP_KEYS: Final = {"connection_creation_rate": "int"}
QUOTA_KEYS: Final = frozenset(_USER_CLIENT_KEYS) | frozenset(_IP_KEYS)
_INTEGRAL_MAX: Final = {"short": 2**15 - 1, "int": 2**31 - 1, "long": 2**63 - 1}
_ARTICLE: Final = {"short": "a SHORT", "int": "an INT", "long": "a LONG"}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]  # as the image keys it (registrations.quota_entity)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """One entry of an AlterClientQuotas request: the entity as sent (pairs, duplicates
    kept) and its ops (key, value; None removes the key)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotaResult:
    entity: tuple[tuple[str, str | None], ...]
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


class DescribeQuotasError(Exception):
    """A filter Kafka refuses: the whole DescribeClientQuotas answers `code`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Refused(Exception):
    pass


def entity_text(entity: Iterable[tuple[str, str | None]]) -> str:
    """How Kafka's ClientQuotaEntity prints in messages."""
    entries = ", ".join(f"{kind}={name}" for kind, name in entity)
    return f"ClientQuotaEntity(entries={{{entries}}})"


def alter_client_quotas(
    quotas: Mapping[Entity, Mapping[str, float]],
    alterations: Sequence[ClientQuotaAlteration],
) -> tuple[list[ClientQuotaRecord], tuple[ClientQuotaResult, ...]]:
    """Records and per-entity results of an AlterClientQuotas request, given the current
    quotas (`MetadataImage.client_quotas.entities`)."""
    records: list[ClientQuotaRecord] = []
    results: dict[Entity, ClientQuotaResult] = {}
    for alteration in alterations:
        key = quota_entity(dict(alteration.entity).items())  # Kafka keeps a map: last wins
        wanted: dict[str, float | None] = {}
        error: str | None = None
        for name, value in alteration.ops:
            if name in wanted:
                error = (f"Duplicate quota key {name} not updating quota for this entity "
                         f"{entity_text(key)}")
            else:
                wanted[name] = value
        if key in results:
            results[key] = ClientQuotaResult(key, ErrorCode.invalid_request,
                                             f"Ignoring duplicate entity {entity_text(key)}")
            continue
        if error is not None:
            results[key] = ClientQuotaResult(key, ErrorCode.invalid_request, error)
            continue
        try:
            records += _alter_entity(quotas.get(key, immutables.Map()), alteration.entity,
                                     key, wanted)
        except _Refused as refused:
            results[key] = ClientQuotaResult(key, ErrorCode.invalid_request, str(refused))
            continue
        results[key] = ClientQuotaResult(key)
    # a refused entity writes nothing, even when a duplicate of it came first
    failed = {key for key, result in results.items() if result.error_code != ErrorCode.none}
    kept = [r for r in records if quota_entity(
        (e.entity_type, e.entity_name) for e in r.entity) not in failed]
    return kept, tuple(results.values())


def _alter_entity(current: Mapping[str, float], sent: Sequence[tuple[str, str | None]],
                  key: Entity, wanted: Mapping[str, float | None]) -> list[ClientQuotaRecord]:
    keys = _entity_keys(sent)
    data = tuple(ClientQuotaRecord.EntityData(entity_type=kind, entity_name=name)
                 for kind, name in key)
    records = []
    for name, value in wanted.items():
        if value is None:
            if name in current:
                records.append(ClientQuotaRecord(entity=data, key=name, remove=True))
            continue
        _check_value(keys, name, value)
        if current.get(name) != value:
            records.append(ClientQuotaRecord(entity=data, key=name, value=value))
    return records


def _entity_keys(sent: Sequence[tuple[str, str | None]]) -> Mapping[str, str]:
    """The quota keys an entity takes (Kafka's validateEntity, configKeysForEntityType)."""
    if not sent:
        raise _Refused("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in sent:
        if kind in seen:
            raise _Refused(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _Refused(f"Unhandled client quota entity type: {kind}")
        seen[kind] = name
        if name is not None and not name:
            raise _Refused(f"Empty {kind} not supported")
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            raise _Refused("Invalid quota entity combination, IP entity shouldnot be combined "
                           "with User or ClientId")  # sic, Kafka's message
        address = seen[IP]
        if address is not None and not _valid_ip(address):
            raise _Refused(f"{address} is not a valid IP or resolvable host.")
        return _IP_KEYS
    return _USER_CLIENT_KEYS


def _valid_ip(address: str) -> bool:
    """An IP address literal. Kafka also takes a host name it can resolve; resolving here
    would put DNS inside the controller's decision (see docs/deviations.md)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _check_value(keys: Mapping[str, str], name: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue."""
    kind = keys.get(name)
    if kind is None:
        raise _Refused(f"Invalid configuration key {name}")
    if not value > 0.0:  # NaN too: it is not above 0
        raise _Refused(f"Quota {name} must be greater than 0")
    if kind == "double":
        return  # any positive double, as in Kafka (Infinity too: no limit)
    if value > _INTEGRAL_MAX[kind]:
        raise _Refused(f"Proposed value for {name} is too large for {_ARTICLE[kind]}.")
    if abs(value % 1.0) > 1e-6:
        raise _Refused(f"{name} cannot be a fractional value.")


def describe_client_quotas(
    quotas: Mapping[Entity, Mapping[str, float]],
    components: Sequence[FilterComponent],
    *,
    strict: bool,
) -> list[tuple[Entity, Mapping[str, float]]]:
    """The entities matching the filter, with their quotas; DescribeQuotasError for a
    filter Kafka refuses (Kafka's ClientQuotasImage.describe)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise DescribeQuotasError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in typed:
            raise DescribeQuotasError(
                ErrorCode.invalid_request,
                f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise DescribeQuotasError(ErrorCode.unsupported_version,
                                      f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise DescribeQuotasError(ErrorCode.invalid_request, "Request specified "
                                          "MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise DescribeQuotasError(ErrorCode.invalid_request, "Request specified "
                                          "MATCH_TYPE_DEFAULT, but also specified a match "
                                          "string.")
            exact[kind] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise DescribeQuotasError(ErrorCode.invalid_request, "Request specified "
                                          "MATCH_TYPE_SPECIFIED, but also specified a match "
                                          "string.")
            typed.add(kind)
        else:
            raise DescribeQuotasError(ErrorCode.invalid_request,
                                      f"Unknown match type {component.match_type}")
    filtered = set(exact) | typed
    if IP in filtered and (USER in filtered or CLIENT_ID in filtered):
        raise DescribeQuotasError(
            ErrorCode.invalid_request, "Invalid entity filter component combination. IP "
            "filter component should not be used with user or clientId filter component.")
    found = []
    for entity, values in quotas.items():
        entries = dict(entity)
        if strict and len(entries) != len(filtered):
            continue
        if any(kind not in entries or entries[kind] != name for kind, name in exact.items()):
            continue
        if any(kind not in entries for kind in typed):
            continue
        found.append((entity, values))
    return found
