"""The controller's AlterUserScramCredentials decisions and the image's describe, each of
Kafka's refusals (ScramControlManager, ScramImage.describe) with its code and message."""

from __future__ import annotations

import immutables
import pytest

from pykraft.broker.credential_apis import derive_keys
from pykraft.controller.scram import (
    MV_3_5_IV2,
    AlterScramResult,
    DescribedUser,
    ScramDeletion,
    ScramUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from pykraft.errors import ErrorCode
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from pykraft.metadata.registrations import ScramCredential, ScramKey
from pykraft.net.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential

SHA256, SHA512 = SCRAM_SHA_256.code, SCRAM_SHA_512.code
MV = 21  # 4.0-IV3 and anything from 3.5-IV2 on supports SCRAM
SALT = b"0123456789abcdef"


def _salted(mechanism_code: int, password: str, iterations: int = 4096) -> bytes:
    mechanism = SCRAM_SHA_256 if mechanism_code == SHA256 else SCRAM_SHA_512
    return mechanism.salted_password(password.encode(), SALT, iterations)


def _upsert(name: str, mechanism: int = SHA512, iterations: int = 4096,
            password: str = "secret") -> ScramUpsertion:
    return ScramUpsertion(name, mechanism, iterations, SALT,
                          _salted(mechanism, password, max(iterations, 1)))


def _existing() -> immutables.Map[ScramKey, ScramCredential]:
    return immutables.Map({ScramKey(SHA256, "bob"): credential(SCRAM_SHA_256, "pw",
                                                               salt=SALT)})


def _alter(deletions: list[ScramDeletion], upsertions: list[ScramUpsertion],
           metadata_version: int = MV) -> tuple[list[object], dict[str, AlterScramResult]]:
    records, results = alter_user_scram_credentials(_existing(), metadata_version, deletions,
                                                    upsertions, derive_keys)
    assert len({r.user for r in results}) == len(results)  # one answer per user
    return list(records), {r.user: r for r in results}


def test_an_upsertion_stores_the_keys_the_salted_password_derives_and_never_the_password() \
        -> None:
    records, results = _alter([], [_upsert("alice", SHA512, 8192, "alice-secret")])
    assert results == {"alice": AlterScramResult("alice")}
    [record] = records
    assert isinstance(record, UserScramCredentialRecord)
    expected = credential(SCRAM_SHA_512, "alice-secret", iterations=8192, salt=SALT)
    assert (record.name, record.mechanism, record.iterations) == ("alice", SHA512, 8192)
    assert (record.salt, record.stored_key, record.server_key) == (
        expected.salt, expected.stored_key, expected.server_key)
    salted = _salted(SHA512, "alice-secret", 8192)
    assert salted not in (record.stored_key, record.server_key)
    assert "salted_password" not in repr(_upsert("alice"))


def test_a_deletion_of_an_existing_credential_writes_a_remove_record() -> None:
    records, results = _alter([ScramDeletion("bob", SHA256)], [])
    assert records == [RemoveUserScramCredentialRecord(name="bob", mechanism=SHA256)]
    assert results["bob"].error_code == ErrorCode.none


@pytest.mark.parametrize(("deletions", "upsertions", "user", "code", "message"), [
    ([ScramDeletion("bob", SHA512)], [], "bob", ErrorCode.resource_not_found,
     "Attempt to delete a user credential that does not exist"),
    ([ScramDeletion("nobody", SHA256)], [], "nobody", ErrorCode.resource_not_found,
     "Attempt to delete a user credential that does not exist"),
    ([], [_upsert("carol", mechanism=3)], "carol", ErrorCode.unsupported_sasl_mechanism,
     "Unknown SCRAM mechanism"),
    ([ScramDeletion("bob", 0)], [], "bob", ErrorCode.unsupported_sasl_mechanism,
     "Unknown SCRAM mechanism"),
    ([], [_upsert("")], "", ErrorCode.unacceptable_credential, "Username must not be empty"),
    ([ScramDeletion("", SHA256)], [], "", ErrorCode.unacceptable_credential,
     "Username must not be empty"),
    ([], [_upsert("carol", iterations=4095)], "carol", ErrorCode.unacceptable_credential,
     "Too few iterations"),
    ([], [_upsert("carol", iterations=16385)], "carol", ErrorCode.unacceptable_credential,
     "Too many iterations"),
    ([], [_upsert("carol", SHA256), _upsert("carol", SHA256)], "carol",
     ErrorCode.duplicate_resource,
     "A user credential cannot be altered twice in the same request"),
    # Kafka keys a request by user: two mechanisms of one user in one request are refused
    ([ScramDeletion("bob", SHA256)], [_upsert("bob", SHA512)], "bob",
     ErrorCode.duplicate_resource,
     "A user credential cannot be altered twice in the same request"),
    ([ScramDeletion("bob", SHA256), ScramDeletion("bob", SHA256)], [], "bob",
     ErrorCode.duplicate_resource,
     "A user credential cannot be altered twice in the same request"),
])
def test_each_refusal_has_kafkas_code_and_message_and_writes_nothing(
        deletions: list[ScramDeletion], upsertions: list[ScramUpsertion], user: str,
        code: ErrorCode, message: str) -> None:
    records, results = _alter(deletions, upsertions)
    assert records == []
    assert results == {user: AlterScramResult(user, code, message)}


def test_the_iteration_bounds_themselves_are_accepted() -> None:
    records, results = _alter([], [_upsert("low", iterations=4096),
                                   _upsert("high", iterations=16384)])
    assert len(records) == 2
    assert all(r.error_code == ErrorCode.none for r in results.values())


def test_a_duplicate_user_is_refused_once_even_when_named_three_times() -> None:
    records, results = _alter([], [_upsert("dan"), _upsert("dan", SHA256), _upsert("dan")])
    assert records == []
    assert results["dan"].error_code == ErrorCode.duplicate_resource


def test_users_are_decided_on_their_own() -> None:
    records, results = _alter([ScramDeletion("bob", SHA256)],
                              [_upsert("ok"), _upsert("bad", iterations=1)])
    assert {type(r).__name__ for r in records} == {"RemoveUserScramCredentialRecord",
                                                   "UserScramCredentialRecord"}
    assert [results[u].error_code for u in ("bob", "ok", "bad")] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unacceptable_credential]


def test_below_metadata_version_3_5_iv2_every_entry_is_unsupported_version() -> None:
    records, results = _alter([ScramDeletion("bob", SHA256)], [_upsert("alice")],
                              metadata_version=MV_3_5_IV2 - 1)
    assert records == []
    assert {r.error_code for r in results.values()} == {ErrorCode.unsupported_version}
    assert results["alice"].error_message == "The current metadata version does not support " \
        "SCRAM"
    records, _ = _alter([], [_upsert("alice")], metadata_version=MV_3_5_IV2)
    assert len(records) == 1


def test_the_records_fold_into_the_image_and_describe_shows_mechanisms_and_iterations() \
        -> None:
    records, _ = _alter([], [_upsert("alice", SHA512, 8192), _upsert("zed", SHA256)])
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)  # type: ignore[arg-type]
    image = delta.apply(1, 1)
    delta = MetadataDelta(image)
    delta.replay(UserScramCredentialRecord(
        name="alice", mechanism=SHA256, salt=SALT, stored_key=b"s", server_key=b"k",
        iterations=4096))
    credentials = delta.apply(2, 1).scram.credentials
    everyone = describe_user_scram_credentials(credentials, None)
    assert everyone == (DescribedUser("alice", credentials=((SHA256, 4096), (SHA512, 8192))),
                        DescribedUser("zed", credentials=((SHA256, 4096),)))
    assert describe_user_scram_credentials(credentials, []) == everyone
    named = describe_user_scram_credentials(credentials, ["zed", "nobody", "alice", "alice"])
    assert named == (
        DescribedUser("zed", credentials=((SHA256, 4096),)),
        DescribedUser("nobody", ErrorCode.resource_not_found,
                      "Attempt to describe a user credential that does not exist: nobody"),
        DescribedUser("alice", ErrorCode.duplicate_resource,
                      "Cannot describe SCRAM credentials for the same user twice in a single "
                      "request: alice"))


def test_derive_keys_refuses_an_unknown_mechanism() -> None:
    with pytest.raises(ValueError):
        derive_keys(9, b"x")
