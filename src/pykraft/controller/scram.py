"""SCRAM credentials (KIP-554): AlterUserScramCredentials decided, DescribeUserScramCredentials
answered.

Theory of operation. A credential is keyed by (mechanism, user name) and stored as one
UserScramCredentialRecord (salt, StoredKey, ServerKey, iterations) in the metadata log;
RemoveUserScramCredentialRecord deletes it. The image's delta folds both into
`MetadataImage.scram.credentials`, which brokers (to authenticate and to describe) and
standby controllers replay alike. A password never reaches the cluster: the client sends the
salt and SaltedPassword = Hi(password, salt, iterations); the active controller derives
StoredKey and ServerKey from them (`pykraft.net.scram`) and writes only those, so no record,
snapshot or log line holds anything a client could log in with.

`alter_user_scram_credentials` is Kafka's ScramControlManager.alterCredentials, in its order
and with its codes and messages:

- a user named twice in one request (by any mix of deletions and upsertions, whatever their
  mechanisms) fails as a whole with DUPLICATE_RESOURCE, and its other entries are not applied
  -- Kafka keys the request by user, so one request cannot change two mechanisms of a user;
- below metadata.version 3.5-IV2 every entry fails with UNSUPPORTED_VERSION;
- an empty user name is UNACCEPTABLE_CREDENTIAL, an unknown mechanism code
  UNSUPPORTED_SASL_MECHANISM;
- an upsertion's iterations must lie in [4096, 16384] (UNACCEPTABLE_CREDENTIAL);
- a deletion of a credential that does not exist is RESOURCE_NOT_FOUND.

The surviving entries become records, applied atomically with one answer per user.

`describe_user_scram_credentials` is Kafka's ScramImage.describe: the named users (all users
with a credential when none are named), each with its mechanisms and iteration counts, a
user named twice DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND. Salts and keys are
never described.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pykraft.errors import ErrorCode
from pykraft.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from pykraft.metadata.registrations import ScramCredential, ScramKey

__all__ = [
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "MECHANISM_CODES",
    "MV_3_5_IV2",
    "KeyDerivation",
    "AlterScramResult",
    "DescribedUser",
    "ScramDeletion",
    "ScramUpsertion",
    "alter_user_scram_credentials",
    "describe_user_scram_credentials",
    "scram_supported",
]

# the first metadata.version whose log may hold SCRAM records (MetadataVersion.IBP_3_5_IV2)
MV_3_5_IV2: Final = 11
# Kafka's ScramMechanism codes (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) and iteration bounds; the
# hashes themselves live in pykraft.net.scram, which a core may not import: the shell hands
# `alter_user_scram_credentials` its key derivation
MECHANISM_CODES: Final = frozenset({1, 2})
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384  # ScramControlManager.MAX_ITERATIONS

# (mechanism code, salted password) -> (StoredKey, ServerKey)
KeyDerivation = Callable[[int, bytes], tuple[bytes, bytes]]

DUPLICATE_MESSAGE: Final = "A user credential cannot be altered twice in the same request"
UNSUPPORTED_MESSAGE: Final = "The current metadata version does not support SCRAM"
_DESCRIBE_DUPLICATE: Final = ("Cannot describe SCRAM credentials for the same user twice in a "
                              "single request: ")
_DESCRIBE_UNKNOWN: Final = "Attempt to describe a user credential that does not exist: "

ScramRecord = UserScramCredentialRecord | RemoveUserScramCredentialRecord


def scram_supported(metadata_version: int) -> bool:
    return metadata_version >= MV_3_5_IV2


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """One upsertion as the client sent it. `salted_password` is a secret (whoever holds it
    can log in as the user): it is kept out of the repr, so it cannot reach a log line."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class AlterScramResult:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedUser:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism code, iterations)


def _name_and_mechanism_error(name: str, mechanism: int) -> AlterScramResult | None:
    if not name:
        return AlterScramResult(name, ErrorCode.unacceptable_credential,
                                "Username must not be empty")
    if mechanism not in MECHANISM_CODES:
        return AlterScramResult(name, ErrorCode.unsupported_sasl_mechanism,
                                "Unknown SCRAM mechanism")
    return None


def _upsertion_error(upsertion: ScramUpsertion) -> AlterScramResult | None:
    error = _name_and_mechanism_error(upsertion.name, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < ITERATIONS_MIN:
        return AlterScramResult(upsertion.name, ErrorCode.unacceptable_credential,
                                "Too few iterations")
    if upsertion.iterations > ITERATIONS_MAX:
        return AlterScramResult(upsertion.name, ErrorCode.unacceptable_credential,
                                "Too many iterations")
    return None


def _deletion_error(credentials: Mapping[ScramKey, ScramCredential],
                    deletion: ScramDeletion) -> AlterScramResult | None:
    error = _name_and_mechanism_error(deletion.name, deletion.mechanism)
    if error is not None:
        return error
    if ScramKey(deletion.mechanism, deletion.name) not in credentials:
        return AlterScramResult(deletion.name, ErrorCode.resource_not_found,
                                "Attempt to delete a user credential that does not exist")
    return None


def upsertion_record(upsertion: ScramUpsertion,
                     derive: KeyDerivation) -> UserScramCredentialRecord:
    """The record of a valid upsertion: the salted password turned into the stored keys."""
    stored_key, server_key = derive(upsertion.mechanism, upsertion.salted_password)
    return UserScramCredentialRecord(
        name=upsertion.name, mechanism=upsertion.mechanism, salt=upsertion.salt,
        stored_key=stored_key, server_key=server_key, iterations=upsertion.iterations)


def alter_user_scram_credentials(
    credentials: Mapping[ScramKey, ScramCredential],
    metadata_version: int,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
    derive: KeyDerivation,
) -> tuple[list[ScramRecord], tuple[AlterScramResult, ...]]:
    """Records and per-user results of an AlterUserScramCredentials request, given the
    credentials of the image (`MetadataImage.scram.credentials`) and its metadata.version;
    `derive` turns a salted password into the stored keys (pykraft.net.scram's hashes).

    Results come in Kafka's grouping: deletions done, upsertions done, then refusals, each
    in request order (Kafka's hash maps give no order; clients match results by user)."""
    supported = scram_supported(metadata_version)
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    refused: dict[str, AlterScramResult] = {}
    for deletion in deletions:
        name = deletion.name
        if name in refused:
            continue
        if to_delete.pop(name, None) is not None:
            refused[name] = AlterScramResult(name, ErrorCode.duplicate_resource,
                                             DUPLICATE_MESSAGE)
        elif not supported:
            refused[name] = AlterScramResult(name, ErrorCode.unsupported_version,
                                             UNSUPPORTED_MESSAGE)
        elif (error := _deletion_error(credentials, deletion)) is not None:
            refused[name] = error
        else:
            to_delete[name] = deletion
    for upsertion in upsertions:
        name = upsertion.name
        if name in refused:
            continue
        deleted, upserted = to_delete.pop(name, None), to_upsert.pop(name, None)
        if deleted is not None or upserted is not None:
            refused[name] = AlterScramResult(name, ErrorCode.duplicate_resource,
                                             DUPLICATE_MESSAGE)
        elif not supported:
            refused[name] = AlterScramResult(name, ErrorCode.unsupported_version,
                                             UNSUPPORTED_MESSAGE)
        elif (error := _upsertion_error(upsertion)) is not None:
            refused[name] = error
        else:
            to_upsert[name] = upsertion
    records: list[ScramRecord] = []
    results: list[AlterScramResult] = []
    for deletion in to_delete.values():
        records.append(RemoveUserScramCredentialRecord(name=deletion.name,
                                                       mechanism=deletion.mechanism))
        results.append(AlterScramResult(deletion.name))
    for upsertion in to_upsert.values():
        records.append(upsertion_record(upsertion, derive))
        results.append(AlterScramResult(upsertion.name))
    results.extend(refused.values())
    return records, tuple(results)


def describe_user_scram_credentials(
    credentials: Mapping[ScramKey, ScramCredential], users: Sequence[str] | None,
) -> tuple[DescribedUser, ...]:
    """DescribeUserScramCredentials from an image's credentials: `users` None or empty
    describes every user that has one (sorted by name)."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for key, credential in credentials.items():
        by_user.setdefault(key.name, []).append((key.mechanism, credential.iterations))
    if not users:
        return tuple(DescribedUser(name, credentials=tuple(sorted(found)))
                     for name, found in sorted(by_user.items()))
    counts: dict[str, int] = {}
    for name in users:
        counts[name] = counts.get(name, 0) + 1
    described = []
    for name, count in counts.items():
        if count > 1:
            described.append(DescribedUser(name, ErrorCode.duplicate_resource,
                                           _DESCRIBE_DUPLICATE + name))
        elif name in by_user:
            described.append(DescribedUser(name, credentials=tuple(sorted(by_user[name]))))
        else:
            described.append(DescribedUser(name, ErrorCode.resource_not_found,
                                           _DESCRIBE_UNKNOWN + name))
    return tuple(described)
