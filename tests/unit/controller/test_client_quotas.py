"""Client quotas (KIP-546) in the controller: AlterClientQuotas decides records with Kafka's
checks and messages; the records fold into the image, which DescribeClientQuotas matches
with Kafka's EXACT/DEFAULT/SPECIFIED and strict semantics."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pykraft.controller.quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    ClientQuotaAlteration,
    DescribeQuotasError,
    FilterComponent,
    alter_client_quotas,
    describe_client_quotas,
)
from pykraft.errors import ErrorCode
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import ClientQuotaRecord

Pairs = tuple[tuple[str, str | None], ...]


def alteration(entity: Pairs, **ops: float | None) -> ClientQuotaAlteration:
    return ClientQuotaAlteration(entity, tuple(ops.items()))


def apply(image: MetadataImage, alterations: Sequence[ClientQuotaAlteration]
          ) -> tuple[MetadataImage, list[ClientQuotaRecord]]:
    records, results = alter_client_quotas(image.client_quotas.entities, alterations)
    assert all(r.error_code == ErrorCode.none for r in results), results
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.offset + 1, 1), records


@pytest.fixture
def image() -> MetadataImage:
    """alice, alice+app, the default client, the default user, one ip."""
    image, _ = apply(MetadataImage.EMPTY, [
        alteration((("user", "alice"),), producer_byte_rate=1024.0,
                   consumer_byte_rate=2048.0),
        alteration((("user", "alice"), ("client-id", "app")), request_percentage=50.5),
        alteration((("client-id", None),), controller_mutation_rate=10.0),
        alteration((("user", None),), producer_byte_rate=1.0),
        alteration((("ip", "10.0.0.1"),), connection_creation_rate=5.0),
    ])
    return image


def test_set_changed_and_removed_keys_write_records(image: MetadataImage) -> None:
    """A record only for a value that changes, and a removal only of a key that is set."""
    _, records = apply(image, [alteration(
        (("user", "alice"),), producer_byte_rate=1024.0, consumer_byte_rate=4096.0,
        request_percentage=None, controller_mutation_rate=None)])
    assert [(r.key, r.value, r.remove) for r in records] == [("consumer_byte_rate", 4096.0, False)]
    after, records = apply(image, [alteration((("user", "alice"),), producer_byte_rate=None)])
    assert [(r.key, r.remove) for r in records] == [("producer_byte_rate", True)]
    assert dict(after.client_quotas.entities[(("user", "alice"),)]) == \
        {"consumer_byte_rate": 2048.0}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ((), {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ((("user", "a"), ("user", "b")), {"producer_byte_rate": 1.0},
     "Invalid client quota entity, duplicate entity entry user"),
    ((("group", "g"),), {"producer_byte_rate": 1.0},
     "Unhandled client quota entity type: group"),
    ((("user", ""),), {"producer_byte_rate": 1.0}, "Empty user not supported"),
    ((("ip", "10.0.0.1"), ("user", "a")), {"connection_creation_rate": 1.0},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or "
     "ClientId"),
    ((("ip", "not an ip"),), {"connection_creation_rate": 1.0},
     "not an ip is not a valid IP or resolvable host."),
    ((("ip", "10.0.0.1"),), {"producer_byte_rate": 1.0},
     "Invalid configuration key producer_byte_rate"),
    ((("user", "a"),), {"connection_creation_rate": 1.0},
     "Invalid configuration key connection_creation_rate"),
    ((("client-id", "c"),), {"producer_byte_rate": 0.0},
     "Quota producer_byte_rate must be greater than 0"),
    ((("client-id", "c"),), {"request_percentage": -1.5},
     "Quota request_percentage must be greater than 0"),
    ((("client-id", "c"),), {"request_percentage": float("nan")},
     "Quota request_percentage must be greater than 0"),
    ((("client-id", "c"),), {"producer_byte_rate": 1.5},
     "producer_byte_rate cannot be a fractional value."),
    ((("ip", None),), {"connection_creation_rate": 2.0**31},
     "Proposed value for connection_creation_rate is too large for an INT."),
    ((("user", "a"),), {"consumer_byte_rate": 2.0**64},
     "Proposed value for consumer_byte_rate is too large for a LONG."),
])
def test_refused_alterations_change_nothing(
    image: MetadataImage, entity: Pairs, ops: dict[str, float], message: str
) -> None:
    """Kafka's checks in its order, with its messages: INVALID_REQUEST and no record."""
    good = alteration((("user", "bob"),), producer_byte_rate=8.0)
    records, results = alter_client_quotas(image.client_quotas.entities,
                                           [alteration(entity, **ops), good])
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.invalid_request, message), (ErrorCode.none, None)]
    assert [r.entity[0].entity_name for r in records] == ["bob"]  # the other entity went on


def test_duplicate_keys_and_entities_are_refused(image: MetadataImage) -> None:
    """A key twice for one entity, or an entity twice in one request: refused, nothing
    written for it."""
    twice = ClientQuotaAlteration((("user", "carol"),), (("producer_byte_rate", 1.0),
                                                          ("producer_byte_rate", 2.0)))
    records, results = alter_client_quotas(image.client_quotas.entities, [twice])
    assert records == []
    assert results[0].error_message == (
        "Duplicate quota key producer_byte_rate not updating quota for this entity "
        "ClientQuotaEntity(entries={user=carol})")
    first = alteration((("user", "dave"),), producer_byte_rate=1.0)
    records, results = alter_client_quotas(image.client_quotas.entities, [first, first])
    assert records == []
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.invalid_request,
         "Ignoring duplicate entity ClientQuotaEntity(entries={user=dave})")]


def test_a_fractional_double_quota_and_the_default_ip_are_accepted(image: MetadataImage) -> None:
    after, records = apply(image, [
        alteration((("client-id", "c"),), request_percentage=12.25),
        alteration((("ip", None),), connection_creation_rate=100.0),
        alteration((("ip", "::1"),), connection_creation_rate=7.0),
    ])
    assert len(records) == 3
    assert after.client_quotas.entities[(("ip", None),)]["connection_creation_rate"] == 100.0


def _names(found: list[tuple[Pairs, object]]) -> list[Pairs]:
    return sorted((entity for entity, _ in found), key=repr)


def test_describe_matches_exact_default_and_specified(image: MetadataImage) -> None:
    entities = image.client_quotas.entities
    exact_alice = [FilterComponent("user", MATCH_EXACT, "alice")]
    assert _names(describe_client_quotas(entities, exact_alice, strict=True)) == [
        (("user", "alice"),)]
    assert _names(describe_client_quotas(entities, exact_alice, strict=False)) == [
        (("client-id", "app"), ("user", "alice")), (("user", "alice"),)]
    assert _names(describe_client_quotas(
        entities, [FilterComponent("user", MATCH_DEFAULT, None)], strict=True)) == [
        (("user", None),)]
    assert _names(describe_client_quotas(
        entities, [FilterComponent("user", MATCH_SPECIFIED, None)], strict=True)) == [
        (("user", "alice"),), (("user", None),)]
    both = [FilterComponent("user", MATCH_EXACT, "alice"),
            FilterComponent("client-id", MATCH_SPECIFIED, None)]
    ((entity, values),) = describe_client_quotas(entities, both, strict=True)
    assert entity == (("client-id", "app"), ("user", "alice"))
    assert dict(values) == {"request_percentage": 50.5}
    assert len(describe_client_quotas(entities, [], strict=False)) == 5
    assert describe_client_quotas(entities, [], strict=True) == []


@pytest.mark.parametrize(("components", "code", "message"), [
    ([FilterComponent("", MATCH_SPECIFIED, None)], ErrorCode.invalid_request,
     "Invalid empty entity type."),
    ([FilterComponent("user", MATCH_SPECIFIED, None), FilterComponent("user", MATCH_EXACT, "a")],
     ErrorCode.invalid_request, "Entity type user cannot appear more than once in the filter."),
    ([FilterComponent("group", MATCH_SPECIFIED, None)], ErrorCode.unsupported_version,
     "Unsupported entity type group"),
    ([FilterComponent("user", MATCH_EXACT, None)], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([FilterComponent("user", MATCH_DEFAULT, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([FilterComponent("user", MATCH_SPECIFIED, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([FilterComponent("user", 9, None)], ErrorCode.invalid_request, "Unknown match type 9"),
    ([FilterComponent("ip", MATCH_SPECIFIED, None), FilterComponent("user", MATCH_DEFAULT, None)],
     ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter "
     "component should not be used with user or clientId filter component."),
])
def test_describe_refuses_bad_filters(
    image: MetadataImage, components: list[FilterComponent], code: ErrorCode, message: str
) -> None:
    with pytest.raises(DescribeQuotasError) as refused:
        describe_client_quotas(image.client_quotas.entities, components, strict=False)
    assert (refused.value.code, str(refused.value)) == (code, message)
